#!/usr/bin/env bash
# Every C++ file of src/, tests/, bench/ and fuzz/ is as clang-format writes it with the
# repository's .clang-format (Debian 12's clang-format 14); `clang-format -i FILE` mends one.
set -euo pipefail
cd "$(dirname "$0")/.."
mapfile -t files < <(git ls-files 'src/*.cc' 'src/*.h' 'tests/*.cc' 'tests/*.h' 'bench/*.cc' 'bench/*.h' 'fuzz/*.cc' 'fuzz/*.h')
((${#files[@]} > 0)) || { echo "no C++ files found: not a git checkout?" >&2; exit 1; }
clang-format --style=file --dry-run --Werror "${files[@]}"
echo "${#files[@]} files as clang-format writes them"
