#!/bin/bash
# Every relative link and image in the project's Markdown files names a file that exists.
# A report regenerated with another --png name once left docs/benchmarks.md showing a
# broken image; this catches that and any other dangling link.
# Usage: links_test.sh SOURCE-ROOT
set -uo pipefail
root=${1:?usage: links_test.sh SOURCE-ROOT}
cd "$root" || exit 2
failed=0 checked=0
# The tracked files; outside a git checkout (an unpacked release), those on disk.
mapfile -t files < <(git ls-files '*.md' 2>/dev/null)
[ ${#files[@]} -gt 0 ] ||
    mapfile -t files < <(find . -name '*.md' -not -path './.git/*' -not -path './build*' -not -path './third_party/*')
for md in "${files[@]}"; do
    dir=$(dirname "$md")
    # shellcheck disable=SC2016 # the backquotes are literal
    text=$(awk '/^ *(```|~~~)/ { fenced = !fenced; next } !fenced' "$md" | sed 's/`[^`]*`//g')
    # Inline links and images, ](target) or ](target "title"), and reference definitions,
    # [label]: target (footnotes, [^1]:, aside); a target may be <in angle brackets>, with
    # spaces as %20.
    while IFS= read -r target; do
        if [[ $target == '<'* ]]; then
            target=${target#<}
            target=${target%%>*}
        else
            target=${target%%[[:blank:]]*}
        fi
        target=${target%%#*}
        target=${target//%20/ }
        case $target in '' | http://* | https://* | mailto:*) continue ;; esac
        checked=$((checked + 1))
        case $target in /*) path=.$target ;; *) path=$dir/$target ;; esac  # /...: from the root
        if [ ! -e "$path" ]; then
            echo "FAIL: $md links to $target, which does not exist"
            failed=1
        fi
    done < <(grep -o '\](\([^)]*\))' <<<"$text" | sed 's/^](\(.*\))$/\1/'
        sed -nE 's/^ {0,3}\[[^]^][^]]*\]:[[:blank:]]*(<[^>]*>|[^[:blank:]]*).*$/\1/p' <<<"$text")
done
[ $checked -gt 0 ] || { echo "FAIL: no relative links found; is $root the source tree?"; exit 1; }
[ $failed = 0 ] && echo "ok: $checked relative links resolve"
exit $failed
