"""README.md's command lines against the binary's --help: the same subcommands, every flag a
README command line gives exists in that subcommand's --help (or the global options), and
every value a README line lists as `--flag a|b|c` is one that --help lists for the flag.
Run by CTest through pytest (tests/conftest.py)."""
import os
import re
import subprocess

import pytest

README = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "README.md")


def readme_commands(readme):
    """{subcommand: text of its command line(s)} from the README's shell blocks (a line giving
    only global options, `build/mlaserve --version`, names no subcommand)."""
    commands, current, in_block = {}, None, False
    for line in open(readme, encoding="utf-8"):
        if line.startswith("```"):
            in_block, current = not in_block, None
            continue
        if not in_block:
            continue
        found = re.match(r"build/mlaserve ([^-\s]\S*)", line)
        if found:
            current = found.group(1)
            commands[current] = commands.get(current, "") + line
        elif current and line.startswith(" "):
            commands[current] += line
        else:
            current = None
    return commands


def help_text(binary, *subcommand):
    return subprocess.run([binary, *subcommand, "--help"], capture_output=True, text=True, check=True).stdout


def help_options(text):
    """{flag: its help line(s)} of a --help text."""
    options, last = {}, None
    for line in text.splitlines():
        found = re.match(r"\s+((?:-\w,)?--[\w-]+(?:,--[\w-]+)*)", line)
        if found:
            last = found.group(1).split(",")
            for flag in last:
                options[flag] = line
        elif last and line.startswith(" " * 20):
            for flag in last:
                options[flag] += " " + line.strip()
    return options


@pytest.fixture(scope="module")
def top_help(binary):
    return help_text(binary)


def listed_subcommands(top):
    return set(re.findall(r"^  ([a-z][\w-]+)\s{2,}", top.split("Subcommands:")[1], re.M))


def test_readme_command_lines_are_the_subcommands(top_help):
    commands = readme_commands(README)
    assert set(commands) == listed_subcommands(top_help)


@pytest.mark.parametrize("command", sorted(readme_commands(README)))
def test_readme_flags_and_values_are_in_help(binary, top_help, command):
    text = readme_commands(README)[command]
    assert command in listed_subcommands(top_help)
    options = {**help_options(top_help), **help_options(help_text(binary, command))}
    flags = re.findall(r"(?<![\w-])(--[a-z][\w-]*|-[a-z])\b", text)
    assert not [flag for flag in flags if flag not in options], "README flags not in --help"
    for flag, values in re.findall(r"(--[a-z][\w-]*) ((?:[\w.:-]+\|)+[\w.:-]+)", text):
        # "int4:32" is one value of --help's "int4[:group]"; "..." stands for the rest
        unknown = [v for v in values.split("|") if flag in options and v != "..."
                   and not re.search(rf"(?<![\w-]){re.escape(v.split(':')[0])}(?![\w-])", options[flag])]
        assert not unknown, f"{flag}: README's values {values}; --help says: {options.get(flag, '').strip()}"


def test_version_names_the_source_tree(binary):
    """`mlaserve --version`: the project's version and the commit the binary was built from."""
    out = subprocess.run([binary, "--version"], capture_output=True, text=True, check=True).stdout.strip()
    match = re.fullmatch(r"mlaserve (\d+\.\d+\.\d+) \(git ([0-9a-f]{12})(-dirty)?\)", out)
    assert match, out
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    head = subprocess.run(["git", "-C", root, "rev-parse", "HEAD"], capture_output=True, text=True)
    if head.returncode == 0:
        assert head.stdout.startswith(match.group(2)), (out, head.stdout)
