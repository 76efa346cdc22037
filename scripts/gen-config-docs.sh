#!/usr/bin/env bash
# Regenerates the key table of docs/configuration.md from the schema in
# common/config/options.cc (the table sits between the two marker lines).
# A unit test fails when the committed table is out of date.
set -euo pipefail
cd "$(dirname "$0")/.."
bin="${WEIR_BIN_DIR:-build/bin}"
doc=docs/configuration.md
table="$("$bin/weir-jobmanager" --print-config-reference)"
python3 - "$doc" "$table" <<'PY'
import sys
path, table = sys.argv[1], sys.argv[2]
text = open(path).read()
begin, end = "<!-- BEGIN GENERATED: weir-jobmanager --print-config-reference -->", "<!-- END GENERATED -->"
head, rest = text.split(begin)
_, tail = rest.split(end)
open(path, "w").write(head + begin + "\n" + table.rstrip("\n") + "\n" + end + tail)
PY
echo "gen-config-docs: updated $doc"
