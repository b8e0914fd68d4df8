#!/bin/sh
# The README and docs/ speak to users: no words that mean something only to the
# project's own team (issue numbers, "the seed", "the contract", "(item 4)").
# usage: check.sh <source dir>
set -u
src=$1
hits=$(cd "$src" && grep -n -E -i 'issue[ -]?[0-9]|issues [0-9]|\(item [0-9]|the contract|contract'"'"'s' README.md docs/*.md docs/backends/*.md
  cd "$src" && grep -n -E "(^|[^_A-Za-z])[Ss]eed('s)?([^_A-Za-z]|$)" README.md docs/*.md docs/backends/*.md)
if [ -n "$hits" ]; then
  echo "FAIL words a reader of the repository cannot know (say what is meant instead):"
  echo "$hits" | sed 's/^/  /'
  exit 1
fi
echo "docs: README.md and docs/ have no issue numbers, 'the seed' or 'the contract'"
