#!/usr/bin/env bash
# The GPU tests on a real YARN cluster (tests/integration/test_gpus.py: the stand-in-or-real ones
# and the `gpu` ones, a PyTorch job on the device YARN granted; the advice's GPU heuristic on a
# GPU a job never touched, test_advice.py) on a machine with an NVIDIA GPU and
# nothing else of ours: no JDK, Maven or package registry. What they need is carried in
# .device-deps/, prepared here on a build machine:
#
#   bench/gpu_yarn.sh --prepare     # jre.tar.xz (jlink'ed JRE 17), hadoop-{a,b}.tar (the cached
#                                   # Hadoop jars, in two halves), wheels/ (py4j, defusedxml, fastavro)
#   bench/gpu_yarn.sh --unpack      # on the GPU machine: unpack whatever of them has arrived
#   bench/gpu_yarn.sh [OUT_DIR]     # unpack, then run the tests; JSON to OUT_DIR/<gpu>-gpu_yarn.json
#
# (Carried in parts because one transfer to the GPU machine holds 64 MiB; the target/ jar travels
# too.) The JSON has the device, each test's outcome and time, and what the `gpu` test measured.
# It fails (exit 3) when any of those tests skipped: on a GPU machine every one must run.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
DEPS="$ROOT/.device-deps"
VERSION="$(sed -n 's:.*<hadoop.version>\(.*\)</hadoop.version>.*:\1:p' pom.xml | head -1)"

prepare() {
  mkdir -p "$DEPS"
  local lib="${TONY_PY_CACHE:-$HOME/.cache/tony-py}/hadoop-$VERSION/lib"
  [ -f "$lib/.complete" ] || { echo "no Hadoop jars in $lib: run scripts/bootstrap first" >&2; exit 2; }
  # a JRE of the JDK's modules but its tools (javac, jshell, ...): what the daemons and the client JVM need
  local mods
  mods="$(java --list-modules | sed 's/@.*//' | grep -v -E '^(jdk\.(compiler|localedata|jshell|javadoc|jlink|jpackage|jdeps|jconsole|hotspot\.agent|internal\.le|internal\.opt|editpad|jcmd|jartool|jstatd|jsobject|accessibility|jdi|jdwp\.agent|internal\.vm\.compiler.*|incubator.*|random)|java\.smartcardio)$' | paste -sd,)"
  rm -rf "$DEPS/jre" && jlink --add-modules "$mods" --strip-debug --no-header-files --no-man-pages --compress=2 \
    --output "$DEPS/jre"
  tar -C "$DEPS" -cJf "$DEPS/jre.tar.xz" jre && rm -rf "$DEPS/jre"
  local cache="$DEPS/cache/hadoop-$VERSION"
  rm -rf "$DEPS/cache" && mkdir -p "$cache" && cp -r "$lib" "$cache/lib"
  (cd "$DEPS/cache" && ls "hadoop-$VERSION/lib"/*.jar | awk 'NR % 2' | tar -cf "$DEPS/hadoop-a.tar" -T - \
    && { ls "hadoop-$VERSION/lib"/*.jar | awk '!(NR % 2)'; echo "hadoop-$VERSION/lib/.complete"; } \
       | tar -cf "$DEPS/hadoop-b.tar" -T -)
  rm -rf "$DEPS/cache"
  rm -rf "$DEPS/wheels" && python3 -m pip download -q --only-binary=:all: --python-version 3.12 \
    --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 --no-deps -d "$DEPS/wheels" \
    "py4j==0.10.9.9" defusedxml fastavro
  ls -la "$DEPS" "$DEPS/wheels"
}

unpack() {
  mkdir -p "$DEPS/cache"
  if [ -f "$DEPS/jre.tar.xz" ]; then tar -C "$DEPS" -xJf "$DEPS/jre.tar.xz" && rm -f "$DEPS/jre.tar.xz"; fi
  for part in a b; do
    if [ -f "$DEPS/hadoop-$part.tar" ]; then tar -C "$DEPS/cache" -xf "$DEPS/hadoop-$part.tar" && rm -f "$DEPS/hadoop-$part.tar"; fi
  done
  if [ -d "$DEPS/wheels" ] && [ ! -d "$DEPS/site" ]; then
    mkdir -p "$DEPS/site" && for w in "$DEPS"/wheels/*.whl; do python3 -m zipfile -e "$w" "$DEPS/site"; done
  fi
  ls "$DEPS" && ls "$DEPS/cache/hadoop-$VERSION/lib" 2>/dev/null | wc -l
}

case "${1:-}" in
  --prepare) prepare; exit 0 ;;
  --unpack) unpack; exit 0 ;;
esac
OUT="${1:-${OUT:-/tmp/gpu-yarn}}"
mkdir -p "$OUT"
unpack >/dev/null
export JAVA_HOME="$DEPS/jre" TONY_PY_CACHE="$DEPS/cache" PYTHONPATH="$ROOT:$DEPS/site${PYTHONPATH:+:$PYTHONPATH}"
export PATH="$JAVA_HOME/bin:$PATH" TONY_TEST_WORKERS=0
nvidia-smi --query-gpu=index,name,driver_version,memory.total,utilization.gpu --format=csv > "$OUT/nvidia-smi.csv" || true
set +e
python3 -m pytest tests/integration/test_gpus.py \
  "tests/integration/test_advice.py::test_gpus_a_job_never_touched_get_zero_and_used_ones_nothing" \
  -p no:cacheprovider -p no:xdist -rA -v \
  --junitxml "$OUT/gpu.xml" > "$OUT/pytest.log" 2>&1
rc=$?
set -e
tail -40 "$OUT/pytest.log"
if [ "$rc" != 0 ]; then  # what the GPU NodeManager said (its GPU plugin reads this machine's nvidia-smi)
  for log in .test-cluster/logs/*nodemanager1*.log; do [ -f "$log" ] && tail -c 200000 "$log" > "$OUT/nodemanager1.log.tail"; done
  nvidia-smi -x -q > "$OUT/nvidia-smi.xml" 2>&1 || true
fi
python3 - "$OUT" "$rc" <<'EOF'
import json, re, subprocess, sys
import xml.etree.ElementTree as ET
out, rc = sys.argv[1], int(sys.argv[2])
tests = []
for case in ET.parse(f"{out}/gpu.xml").iter("testcase"):
    outcome = "failed" if case.find("failure") is not None or case.find("error") is not None else \
        "skipped" if case.find("skipped") is not None else "passed"
    tests.append({"test": case.get("name"), "outcome": outcome, "seconds": float(case.get("time"))})
log = open(f"{out}/pytest.log").read()
measured = re.findall(r"\[gpu\] (.*)", log)
result = {"machine": open(f"{out}/nvidia-smi.csv").read().strip().splitlines(), "pytest_exit_code": rc,
          "tests": tests, "gpu_test_said": measured,
          "all_passed": rc == 0 and all(t["outcome"] == "passed" for t in tests)}
text = json.dumps(result, indent=2)
print(text)
model = result["machine"][1].split(",")[1].split()[-1].lower() if len(result["machine"]) > 1 else "gpu"
open(f"{out}/{model}-gpu_yarn.json", "w").write(text + "\n")  # e.g. h100-gpu_yarn.json
# on a GPU machine a skip means the real-GPU path was not tried: a failure of this run, not a
# pass (pytest's own exit code is 0 then)
not_passed = [t["test"] for t in tests if t["outcome"] != "passed"]
if rc == 0 and (not_passed or not tests):
    print(f"gpu_yarn.sh: every test must run and pass on a GPU machine; these did not: {not_passed or 'none ran'}",
          file=sys.stderr)
    sys.exit(3)
EOF
exit "$rc"  # (set -e: the check above has exited 3 already if a test skipped)
