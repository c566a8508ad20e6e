#!/usr/bin/env bash
# Dataproc initialization action for TonY-py (like TonY's tony.sh): on the master, installs the
# TonY-py jar, a sample TensorFlow job and a zipped venv for it under /opt/tony-py.
#
#   gsutil cp target/tony-py-*.jar dataproc/tony-py-init.sh gs://BUCKET/tony-py/
#   gsutil cp -r examples gs://BUCKET/tony-py/examples
#   gcloud dataproc clusters create CLUSTER --region REGION --image-version 2.2-debian12 \
#     --initialization-actions gs://BUCKET/tony-py/tony-py-init.sh \
#     --metadata tony-py-jar=gs://BUCKET/tony-py/tony-py-0.1.0.jar,tony-py-examples=gs://BUCKET/tony-py/examples
#
# Metadata: tony-py-jar (required), tony-py-examples (optional; without it no sample job),
# tony-py-venv-packages (optional; default "tensorflow scikit-learn"; "none" for an empty venv).
set -euo pipefail

GET_METADATA="${TONY_PY_GET_METADATA:-/usr/share/google/get_metadata_value}"
metadata() { "$GET_METADATA" "attributes/$1" 2>/dev/null || true; }

ROLE="$(metadata dataproc-role)"
if [ "$ROLE" != "Master" ]; then
  exit 0  # workers need nothing: each job ships TonY-py's runtime to its containers
fi

INSTALL="${TONY_PY_INSTALL_DIR:-/opt/tony-py}"
JAR_URI="$(metadata tony-py-jar)"
EXAMPLES_URI="$(metadata tony-py-examples)"
PACKAGES="$(metadata tony-py-venv-packages)"
PACKAGES="${PACKAGES:-tensorflow scikit-learn}"
if [ -z "$JAR_URI" ]; then
  echo "tony-py-init: set the tony-py-jar metadata to the jar's gs:// URI" >&2
  exit 1
fi

mkdir -p "$INSTALL/deps" "$INSTALL/jobs"
gsutil cp "$JAR_URI" "$INSTALL/tony-py.jar"

# The driver needs a Python 3.11+ on the master: Dataproc 2.2+'s conda python3 is one. Older
# images: install one and pass -Dtony.client.python=/path/to/python3 to the jobs.
PY="${TONY_PY_PYTHON:-/opt/conda/default/bin/python3}"
if ! "$PY" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
  echo "tony-py-init: $PY is not Python 3.11+; jobs need -Dtony.client.python=<a python3.11+>" >&2
  PY=python3
fi

if [ -n "$EXAMPLES_URI" ]; then
  gsutil -m cp -r "$EXAMPLES_URI/tensorflow" "$INSTALL/jobs/"
  mkdir -p "$INSTALL/jobs/TFJob"
  mv "$INSTALL/jobs/tensorflow" "$INSTALL/jobs/TFJob/src"
  cp "$INSTALL/jobs/TFJob/src/multi_worker.xml" "$INSTALL/jobs/TFJob/tony.xml"
  # A zipped venv with the framework, shipped to every task (--python_venv).
  "$PY" -m venv "$INSTALL/deps/tf"
  if [ "$PACKAGES" != "none" ]; then
    # shellcheck disable=SC2086 # the package list is meant to split
    "$INSTALL/deps/tf/bin/pip" install --quiet $PACKAGES
  fi
  (cd "$INSTALL/deps" && zip -qr tf.zip tf)
fi

echo "tony-py-init: installed $INSTALL (jar, jobs, deps)"
