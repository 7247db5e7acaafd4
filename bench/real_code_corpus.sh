#!/usr/bin/env bash
# The real-code corpus that MEM002/MEM003/MEM004 were reviewed on, from the
# package registry: the sources of 13 packages that ship training, evaluation
# and inference code, pinned to the versions reviewed. Unpacked under the
# git-ignored .bench/realcode/src; then memlint runs over them and writes one
# JSON document of findings (the review itself is in bench/REAL_CODE.md).
#
#   bench/real_code_corpus.sh                 # download once, then check
#   bench/real_code_corpus.sh EXTRA_DIR...    # also check other trees (e.g. git clones)
set -eu
cd "$(dirname "$0")/.."
DEST=.bench/realcode
mkdir -p "$DEST/dl" "$DEST/src"
SDISTS="timm==1.0.31 ultralytics==8.4.190 lightning==2.6.6 skorch==1.4.0 d2l==1.0.3
        pytorch-metric-learning==2.9.0 deepctr-torch==0.3.0 pykt-toolkit==0.0.38 recbole==1.2.1"
WHEELS="pytorch-ignite==0.5.5 torchtune==0.6.1 yolov5==7.0.14 pytorch-tabnet==4.1.0"
if [ -z "$(ls "$DEST/src")" ]; then
    for spec in $SDISTS; do
        python -m pip download -q --no-deps --no-binary :all: -d "$DEST/dl" "$spec"
    done
    for spec in $WHEELS; do
        python -m pip download -q --no-deps --only-binary :all: -d "$DEST/dl" "$spec"
    done
    for archive in "$DEST"/dl/*; do
        case "$archive" in
            *.tar.gz) tar -xzf "$archive" -C "$DEST/src" ;;
            *.zip|*.whl) name=$(basename "$archive"); python -m zipfile -e "$archive" "$DEST/src/${name%.*}" ;;
        esac
    done
fi
echo "$(find "$DEST/src" "$@" -name '*.py' | wc -l) Python files" >&2
python -m memlint check --select MEM002,MEM003,MEM004 --format json --exit-zero "$DEST/src" "$@" \
    > "$DEST/findings.json"
python - "$DEST/findings.json" <<'PY'
import collections, json, sys
findings = json.load(open(sys.argv[1]))
print(dict(sorted(collections.Counter(f["code"] for f in findings).items())), file=sys.stderr)
for f in findings:
    print(f"{f['path']}:{f['line']}: {f['code']} {f['message'][:100]}")
PY
