#!/usr/bin/env bash
# Machine-checks kepoch's layering (DESIGN.md "Imports point downward"):
#  - seek/ is pure: no kgo, no net, no os, no time.Now, no goroutines;
#  - errors/ imports no other kepoch package;
#  - metadata/ and seek/ never import consumer/ or producer/;
#  - consumer/ and producer/ never import each other;
#  - kfake and kadm only in cmd/kepoch, integration/, kepochtest/ and _test.go
#    files (kepochtest is a test-support package: applications import it from
#    their own _test.go files, so kfake stays out of their production builds);
#  - no library package imports kepochtest (test support never becomes a
#    dependency of the clients).
set -euo pipefail
cd "$(dirname "$0")/.."
fail=0
# A rule that cannot be checked fails: git or go list refusing (no git work
# tree, a repository git finds of dubious ownership, a package that moved)
# must not read as "no violations".
git rev-parse --is-inside-work-tree >/dev/null || { echo "check-imports: not a git work tree git accepts"; exit 1; }
deny() { # package, pattern, why
  local hits imports
  if ! imports=$(go list -f '{{join .Imports "\n"}}' "./$1"); then
    echo "import rule: cannot list the imports of ./$1"; fail=1; return
  fi
  hits=$(grep -E "$2" <<<"$imports" || true)
  if [ -n "$hits" ]; then echo "import rule: $1 must not import $hits ($3)"; fail=1; fi
}
deny seek '^(net|os|os/exec|github.com/twmb/franz-go/pkg/kgo|github.com/kepoch/kepoch/(consumer|producer|metadata|internal))' "seek is pure"
deny errors '^github.com/kepoch/kepoch/' "errors is the bottom layer"
deny metadata '^github.com/kepoch/kepoch/(consumer|producer|seek)' "imports point downward"
deny consumer '^github.com/kepoch/kepoch/producer' "consumer and producer are siblings"
deny producer '^github.com/kepoch/kepoch/consumer' "consumer and producer are siblings"
for p in errors seek metadata consumer producer $(cd internal && ls -d */ 2>/dev/null | sed 's|/$||;s|^|internal/|'); do
  deny "$p" 'franz-go/pkg/(kfake|kadm)' "test-only dependencies"
  deny "$p" '^github.com/kepoch/kepoch/kepochtest' "kepochtest is test support"
done
rc=0
hits=$(git grep --untracked -nE 'time\.Now\(|go func|^\s*go [a-zA-Z]' -- 'seek/*.go' ':!seek/*_test.go') || rc=$?
case $rc in
  0) echo "import rule: seek/ reads the clock or starts goroutines:"; echo "$hits"; fail=1 ;;
  1) ;; # no match
  *) echo "import rule: git grep failed (exit $rc)"; fail=1 ;;
esac
exit $fail
