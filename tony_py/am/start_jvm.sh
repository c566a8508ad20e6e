#!/bin/bash
# Starts the AM's JVM in its YARN container: `start_jvm.sh java [JVM options...] MAIN_CLASS`.
#
# With class-data sharing (tony_py/bridge/cds.py says why and what the JDK checks): the first AM
# of a TonY-py version and classpath on a node writes an archive of the classes it loaded as its
# JVM exits, and later AMs on that node map it. TONY_AM_CDS names the archive (the client hashes
# the JVM's options into it, this script the java binary and the jars; empty: no archive). It lives beside the NodeManager's own
# per-user cache (usercache/<user>/, which only this user and the NodeManager may use), never in
# a shared directory: a JVM maps it as code. An archive written over 30 days ago is removed by
# the next writer on the node (a later AM writes it anew).
# A JVM that refuses to start with the option starts again without it, once, and only if it
# never got as far as its gateway (the AM itself never runs twice).
# The JVM's exit status is this script's. Written for bash 4.2 and later (no empty "${a[@]}").
set -u
java=$1
shift

# Java 8 (a NodeManager on Java 8): the jar is Java 8 bytecode, but Java 8 refuses the module
# options the client gives every JVM (--add-opens=…) and cannot write a class-data archive at exit.
# Told by the runtime's release file (every JDK and JRE build has one): no JVM started to ask.
if grep -qs '^JAVA_VERSION="1\.' "$(dirname "$(readlink -f "$java")")/../release"; then
  kept=()
  for arg in "$@"; do
    case "$arg" in --add-opens*|--add-exports*) ;; *) kept+=("$arg") ;; esac
  done
  set -- ${kept[@]+"${kept[@]}"}
  TONY_AM_CDS=
fi

cds_opt=
archive=
dumping=
if [ -n "${TONY_AM_CDS:-}" ] && [ -n "${LOCAL_DIRS:-}" ]; then
  # The JDK requires every jar the archive was written with to exist at the same path: the
  # container's links to localized jars (tony-py.jar) die with their container, so the JVM gets
  # the localized files' own paths. The archive's name hashes those, and each jar's (and the
  # java binary's) size and mtime: a jar localized anew or an upgraded install gets a new one.
  # Directories (this container's, last) may differ.
  resolved=
  key=$(stat -L -c '%s %Y' "$java" 2>/dev/null)
  IFS=: read -r -a entries <<< "${CLASSPATH:-}"
  for entry in ${entries[@]+"${entries[@]}"}; do
    if [ -L "$entry" ]; then
      entry=$(readlink -f "$entry")
    fi
    resolved+="${resolved:+:}$entry"
    if [ "$entry" != "$PWD" ]; then
      key+=":$entry"
      case "$entry" in
        *'/*') key+=$(stat -L -c '%n %s %Y' "${entry%/\*}"/*.jar 2>/dev/null) ;;
        *.jar) key+=$(stat -L -c '%s %Y' "$entry" 2>/dev/null) ;;
      esac
    fi
  done
  export CLASSPATH="$resolved"
  dir="${LOCAL_DIRS%%,*}/../../tony-py-cds"
  archive="$dir/${TONY_AM_CDS%.jsa}-$(printf '%s' "$key" | cksum | cut -d' ' -f1).jsa"
  if [ -f "$archive" ]; then
    cds_opt="-XX:SharedArchiveFile=$archive"
  elif mkdir -p -m 700 "$dir" 2>/dev/null; then
    # One writer per archive: the lock holds the writer's pid; a lock whose writer is gone (a
    # JVM killed before it wrote) goes, with its half-written file.
    # (A day-old lock goes too: its pid may be another process's by now.)
    if [ -f "$archive.lock" ]; then
      holder=$(cat "$archive.lock" 2>/dev/null)
      if ! kill -0 "${holder:-0}" 2>/dev/null || [ -n "$(find "$archive.lock" -mmin +1440 2>/dev/null)" ]; then
        rm -f "$archive.lock" "$archive.${holder:-none}.tmp"
      fi
    fi
    if (set -C; echo $$ > "$archive.lock") 2>/dev/null; then
      dumping="$archive.$$.tmp"
      cds_opt="-XX:ArchiveClassesAtExit=$dumping"
      find "$dir" -maxdepth 1 -name 'am-*.jsa' -mtime +30 -delete 2>/dev/null
    fi
  fi
fi

if [ -z "$dumping" ]; then
  exec "$java" ${cds_opt:+"$cds_opt"} "$@"
fi
"$java" "$cds_opt" "$@"
rc=$?
log=$(readlink -f /proc/$$/fd/1)  # the container's am.log: what the JVM said
if [ "$rc" -ne 0 ] && [ -f "$log" ] && ! grep -q "\[tony-am-jvm\] gateway on" "$log" \
    && grep -q "Error occurred during initialization of VM" "$log"; then
  rm -f "$dumping" "$archive.lock"
  exec "$java" "$@"
fi
if [ -s "$dumping" ]; then
  mv -f "$dumping" "$archive"
fi
rm -f "$dumping"
if [ "$(cat "$archive.lock" 2>/dev/null)" = "$$" ]; then
  rm -f "$archive.lock"
fi
exit $rc
