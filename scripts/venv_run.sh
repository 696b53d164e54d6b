#!/usr/bin/env bash
# Runs a test script with the peer-library venv (scripts/venv.sh), or skips (exit 77, which ctest
# reports as "Skipped") with the command that installs what is missing.
#
#   scripts/venv_run.sh BUILD_DIR GROUP SCRIPT [ARGS...]
set -euo pipefail
build=$1 group=$2 script=$3
shift 3
venv=${LMT_VENV:-$build/venv}
if [[ ! -f $venv/.lmt-$group ]]; then
  echo "SKIP: the '$group' peer libraries are not installed in $venv; run: scripts/venv.sh $build $group"
  exit 77
fi
# No model hub, no dataset hub, no telemetry: everything is read from local paths.
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_DATASETS_OFFLINE=1 HF_HUB_DISABLE_TELEMETRY=1
export TOKENIZERS_PARALLELISM=false
exec "$venv/bin/python" "$script" "$@"
