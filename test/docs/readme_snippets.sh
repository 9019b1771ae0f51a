#!/bin/bash
# Puts README.md's C++ blocks, in order, into the templates of TEMPLATE_DIR (sorted by name, one
# per block; the line "// @README@" stands for the block) and writes them to OUT_DIR, with
# #line directives so that a compiler's complaint names README.md's line.
# Usage: readme_snippets.sh README TEMPLATE_DIR OUT_DIR
set -euo pipefail
[ $# = 3 ] || { sed -n '2,5s/^# //p' "$0" >&2; exit 2; }
readme=$1 templates=$2 out=$3
mkdir -p "$out"
mapfile -t names < <(cd "$templates" && printf '%s\n' *.cpp | sort -n)
blocks=$(grep -c '^```cpp$' "$readme" || true)
if [ "$blocks" != "${#names[@]}" ]; then
    echo "$readme has $blocks C++ blocks and $templates ${#names[@]} templates: one per block, in order" >&2
    exit 1
fi
i=0
for name in "${names[@]}"; do
    i=$((i + 1))
    # shellcheck disable=SC2016 # the backquotes are literal
    awk -v want=$i -v readme="$readme" '
        /^ *\/\/ @README@$/ {
            n = 0; inside = 0; line_no = 0
            while ((getline line < readme) > 0) {
                line_no++
                if (line ~ /^```cpp$/) {
                    n++; inside = (n == want)
                    if (inside) printf "#line %d \"%s\"\n", line_no + 1, readme
                    continue
                }
                if (inside && line ~ /^```$/) break
                if (inside) print line
            }
            close(readme)
            printf "#line %d \"%s\"\n", FNR + 1, FILENAME
            next
        }
        { print }' "$templates/$name" >"$out/$name"
done
