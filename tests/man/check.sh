#!/bin/sh
# The manual page tools/ferry.1: it renders without a warning (with man or groff,
# where installed; else a plain check of its macros), and it mentions every
# option that 'ferry bench --help' and 'ferry info --help' list.
# usage: check.sh <ferry.1> <the ferry program>
set -u
page=$1 tool=$2
fail=0
if command -v groff >/dev/null 2>&1; then
  warnings=$(groff -man -Tutf8 -ww -z "$page" 2>&1)
  [ -z "$warnings" ] || { echo "FAIL groff warns about $page: $warnings"; fail=1; }
  how="groff -ww"
elif command -v man >/dev/null 2>&1 && man -l "$page" >/dev/null 2>&1; then
  warnings=$(MANWIDTH=80 man --warnings -l "$page" 2>&1 >/dev/null)
  [ -z "$warnings" ] || { echo "FAIL man warns about $page: $warnings"; fail=1; }
  how="man -l"
else
  # No formatter: the page starts with .TH, and every request is a man macro or a
  # roff request the page uses on purpose.
  head -n 20 "$page" | grep -q '^\.TH FERRY 1 ' || { echo "FAIL $page: no '.TH FERRY 1' line"; fail=1; }
  bad=$(grep -n '^\.' "$page" | grep -v -E '^[0-9]+:\.(\\"|TH|SH|SS|PP|TP|IP|B|I|BR|RB|BI|IB|IR|RI|br|ad|nh|nf|fi|RS|RE)( |$)')
  [ -z "$bad" ] || { echo "FAIL $page: unknown requests: $bad"; fail=1; }
  grep -n ' $' "$page" >/dev/null && { echo "FAIL $page: blanks at the ends of lines"; fail=1; }
  how="a plain check of its macros (no groff or man here)"
fi
# Every long option of the two --help texts is in the page (written \-\- there).
text=$(sed 's/\\-/-/g' "$page")
for cmd in bench info; do
  for opt in $("$tool" "$cmd" --help | grep -o -E '(^|[ ,])--[a-z][a-z-]*' | tr -d ' ,' | sort -u); do
    case "$text" in
    *"$opt"*) ;;
    *) echo "FAIL $page does not mention 'ferry $cmd $opt'"; fail=1 ;;
    esac
  done
done
[ "$fail" -eq 0 ] && echo "man_page: $page checked with $how and has every option of ferry bench and ferry info"
exit "$fail"
