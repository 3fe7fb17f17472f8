"""Include edges point down the layer order README.md states: a file in src/X includes from
src/X and the folders before X in README's "Data flows one way" sentence, nothing after it
(src/main.cc sits above them all)."""
import os
import re
import sys


def layer_order(readme):
    text = open(readme, encoding="utf-8").read()
    sentence = text[text.index("Data flows one way"):]
    sentence = sentence[:sentence.index("\n\n")]
    order = re.findall(r"`src/([a-z_]+)`", sentence)
    if len(order) != len(set(order)) or len(order) < 5:
        sys.exit(f"README's layer sentence names {order}: expected each folder once")
    return order


def upward_includes(src, order):
    rank = {folder: i for i, folder in enumerate(order)}
    bad = []
    for folder in sorted(os.listdir(src)):
        path = os.path.join(src, folder)
        if not os.path.isdir(path):
            continue
        if folder not in rank:
            bad.append(f"src/{folder} is not in README's layer order")
            continue
        for root, _, files in os.walk(path):
            for name in sorted(files):
                file = os.path.join(root, name)
                for number, line in enumerate(open(file, encoding="utf-8"), 1):
                    match = re.match(r'\s*#\s*include\s+"([a-z_]+)/', line)
                    if match and match.group(1) in rank and rank[match.group(1)] > rank[folder]:
                        bad.append(f"{os.path.relpath(file, src)}:{number} ({folder}) includes {match.group(0)!r}")
    return bad


def main():
    src, readme = sys.argv[1], sys.argv[2]
    order = layer_order(readme)
    bad = upward_includes(src, order)
    print("layer order:", " -> ".join(order))
    for line in bad:
        print("FAIL", line)
    print(f"{len(bad)} include(s) point up")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
