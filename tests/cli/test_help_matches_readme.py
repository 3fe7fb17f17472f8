"""README.md's command lines against the binary's --help: the same subcommands, every flag a
README command line gives exists in that subcommand's --help (or the global options), and
every value a README line lists as `--flag a|b|c` is one that --help lists for the flag.
Usage: test_help_matches_readme.py MLASERVE README.md"""
import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from checklist import check, finish  # noqa: E402


def readme_commands(readme):
    """{subcommand: text of its command line(s)} from the README's shell blocks."""
    commands, current, in_block = {}, None, False
    for line in open(readme, encoding="utf-8"):
        if line.startswith("```"):
            in_block, current = not in_block, None
            continue
        if not in_block:
            continue
        found = re.match(r"build/mlaserve (\S+)", line)
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


def main():
    binary, readme = sys.argv[1], sys.argv[2]
    top = help_text(binary)
    listed = set(re.findall(r"^  ([a-z][\w-]+)\s{2,}", top.split("Subcommands:")[1], re.M))
    commands = readme_commands(readme)
    check("README's command lines are --help's subcommands", set(commands) == listed,
          f"README {sorted(commands)} vs --help {sorted(listed)}")
    global_options = help_options(top)
    for command, text in sorted(commands.items()):
        if command not in listed:
            continue
        options = {**global_options, **help_options(help_text(binary, command))}
        flags = re.findall(r"(?<![\w-])(--[a-z][\w-]*|-[a-z])\b", text)
        missing = [flag for flag in flags if flag not in options]
        check(f"{command}: README's flags are in its --help", not missing, f"not in --help: {missing}")
        for flag, values in re.findall(r"(--[a-z][\w-]*) ((?:[\w.:-]+\|)+[\w.:-]+)", text):
            # "int4:32" is one value of --help's "int4[:group]"; "..." stands for the rest
            unknown = [v for v in values.split("|") if flag in options and v != "..."
                       and not re.search(rf"(?<![\w-]){re.escape(v.split(':')[0])}(?![\w-])", options[flag])]
            check(f"{command} {flag}: README's values {values} are --help's", not unknown,
                  f"--help says: {options.get(flag, '(no such flag)').strip()}")
    finish()


if __name__ == "__main__":
    main()
