#!/bin/bash
# Starts the AM's JVM in its YARN container: `start_jvm.sh java [JVM options...] MAIN_CLASS`.
#
# With class-data sharing (tony_py/bridge/cds.py says why and what the JDK checks): the first AM
# of a TonY-py version and classpath on a node writes an archive of the classes it loaded as its
# JVM exits, and later AMs on that node map it. TONY_AM_CDS names the archive (the client hashes
# the jar and the classpath into it; empty: no archive). It lives beside the NodeManager's own
# per-user cache (usercache/<user>/, which only this user and the NodeManager may use, and which
# the NodeManager clears when it starts afresh), never in a shared directory: a JVM maps it as code.
# A JVM that cannot write one (the JDK refuses some classpaths) starts again without it.
# The JVM's exit status is this script's.
set -u
java=$1
shift

cds_opts=()
archive=
dumping=
if [ -n "${TONY_AM_CDS:-}" ] && [ -n "${LOCAL_DIRS:-}" ]; then
  # The JDK requires every jar the archive was written with to exist at the same path: the
  # container's links to localized jars (tony-py.jar) die with their container, so the JVM gets
  # the localized files' own paths, and the archive's name the hash of those (a jar localized
  # anew gets a new archive). Directories (this container's, last) may differ.
  resolved=()
  key=
  IFS=: read -r -a entries <<< "${CLASSPATH:-}"
  for entry in "${entries[@]}"; do
    if [ -L "$entry" ]; then
      entry=$(readlink -f "$entry")
    fi
    resolved+=("$entry")
    if [ "$entry" != "$PWD" ]; then
      key+="$entry:"
    fi
  done
  CLASSPATH=$(IFS=:; echo "${resolved[*]}")
  export CLASSPATH
  dir="${LOCAL_DIRS%%,*}/../../tony-py-cds"
  archive="$dir/${TONY_AM_CDS%.jsa}-$(printf '%s' "$key" | cksum | cut -d' ' -f1).jsa"
  if [ -f "$archive" ]; then
    cds_opts=("-XX:SharedArchiveFile=$archive")
  elif mkdir -p -m 700 "$dir" 2>/dev/null; then
    # one writer per archive; a lock left by a writer killed mid-dump expires after 10 minutes
    find "$dir" -maxdepth 1 -name '*.lock' -mmin +10 -delete 2>/dev/null
    if (set -C; : > "$archive.lock") 2>/dev/null; then
      dumping="$archive.$$.tmp"
      cds_opts=("-XX:ArchiveClassesAtExit=$dumping")
    fi
  fi
fi

"$java" "${cds_opts[@]}" "$@"
rc=$?
if [ -n "$dumping" ]; then
  log=$(readlink -f /proc/$$/fd/1)  # the container's am.log: where the JVM said why it stopped
  if [ "$rc" -ne 0 ] && [ -f "$log" ] && grep -q "Error occurred during initialization of VM" "$log"; then
    rm -f "$dumping" "$archive.lock"
    "$java" "$@"
    exit $?
  fi
  if [ -s "$dumping" ]; then
    mv -f "$dumping" "$archive"
  fi
  rm -f "$dumping" "$archive.lock"
fi
exit $rc
