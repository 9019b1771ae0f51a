#!/bin/bash
# links_test.sh on a scratch tree (no git, so it reads the files on disk): a dangling
# reference definition fails and is named; inline links, <angle-bracket> and %20 targets,
# titles, footnotes and fenced code are read as Markdown means them.
# Usage: links_test_selftest.sh PATH-TO-links_test.sh
set -uo pipefail
links_test=${1:?usage: links_test_selftest.sh PATH-TO-links_test.sh}
tree=$(mktemp -d) || exit 2
trap 'rm -rf "$tree"' EXIT
mkdir -p "$tree/docs"
touch "$tree/docs/there.md" "$tree/my file.md" "$tree/plot.png"
printf '%s\n' \
    'See [a][gone], [b](<my file.md>), [c](my%20file.md#top "title") and ![p](plot.png).' \
    '' \
    '[gone]:	docs/gone.md "a title, after a tab"' \
    '[kept]: <docs/there.md>' \
    '[^1]: a footnote, not a link' \
    '```' \
    '[code]: not-there.md and [d](not-there.md)' \
    '```' >"$tree/README.md"
failed=0
expect() {  # expect STATUS OUTPUT-REGEX WHAT
    local out rc
    out=$("$links_test" "$tree" 2>&1)
    rc=$?
    if [ "$rc" = "$1" ] && grep -Eqx "$2" <<<"$out"; then
        echo "ok: $3"
    else
        echo "FAIL: $3: exit $rc (want $1), output:"
        sed 's/^/    /' <<<"$out"
        failed=1
    fi
}
expect 1 'FAIL: \./README\.md links to docs/gone\.md, which does not exist' "a dangling definition fails"
[ "$(grep -c 'FAIL' <<<"$("$links_test" "$tree")")" = 1 ] || { echo "FAIL: more than the dangling link reported"; failed=1; }
sed -i 's|docs/gone.md|docs/there.md|' "$tree/README.md"
expect 0 'ok: 5 relative links resolve' "every other form resolves, code and footnotes skipped"
exit $failed
