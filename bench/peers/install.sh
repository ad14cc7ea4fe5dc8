#!/usr/bin/env bash
# Installs the peers of requirements.txt (venv "main") and requirements-tf.txt
# (venv "tf") into ${SLUICE_PEERS_DIR:-~/.cache/sluice/peers}, one "# group:"
# at a time, and records what each group cost (MB on disk, minutes, pip's
# exit status) in costs.json there, so the table can say it. A group already
# installed from the same pins is skipped (its first cost is kept).
# Also installs Debian's FFmpeg libraries for SPDL (it loads them at run time)
# where apt-get works.
#
# Usage: install.sh   (PEERS_PYTHON picks the interpreter, default python3)
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
dir=${SLUICE_PEERS_DIR:-$HOME/.cache/sluice/peers}
py=${PEERS_PYTHON:-python3}
mkdir -p "$dir"
costs=$dir/costs.json
[ -f "$costs" ] || echo '{}' > "$costs"

record() { # group venv mb seconds rc sha
  "$py" - "$costs" "$@" <<'PY'
import json, sys
path, group, venv, mb, secs, rc, sha = sys.argv[1:]
c = json.load(open(path))
c[group] = {"venv": venv, "mb": float(mb), "minutes": round(float(secs) / 60, 2), "rc": int(rc), "pins": sha}
json.dump(c, open(path, "w"), indent=1, sort_keys=True)
PY
}

# apt: SPDL needs libavcodec/libavformat/libavfilter/libswscale at run time.
if command -v apt-get >/dev/null && ! ls /usr/lib/x86_64-linux-gnu/libavfilter.so.* >/dev/null 2>&1; then
  t0=$(date +%s)
  before=$(df -m --output=used / | tail -1)
  { apt-get update -q && apt-get install -y -q libavcodec59 libavformat59 libavfilter8 libswscale6 libavutil57 libavdevice59; } >"$dir/apt.log" 2>&1 ||
    { apt-get install -y -q libavcodec-dev libavformat-dev libavfilter-dev libswscale-dev libavdevice-dev >>"$dir/apt.log" 2>&1; }
  rc=$?
  after=$(df -m --output=used / | tail -1)
  record ffmpeg_apt system $((after - before)) $(( $(date +%s) - t0 )) $rc -
fi

install_file() { # requirements-file venv-name
  local req=$1 venv=$2 v=$dir/$2
  [ -x "$v/bin/python" ] || { "$py" -m venv "$v" && "$v/bin/pip" install -q --upgrade pip; } || return 1
  local group="" lines=()
  flush() {
    [ -n "$group" ] && [ ${#lines[@]} -gt 0 ] || return 0
    local sha; sha=$(printf '%s\n' "${lines[@]}" | sha256sum | cut -c1-12)
    if [ -f "$v/.group-$group" ] && [ "$(cat "$v/.group-$group")" = "$sha" ]; then
      echo "peers: $group already installed" >&2; return 0
    fi
    echo "peers: installing $group: ${lines[*]}" >&2
    local t0 b a rc; t0=$(date +%s); b=$(du -sm "$v" | cut -f1)
    nice -n 10 "$v/bin/pip" install -q --progress-bar off "${lines[@]}" >"$dir/pip-$group.log" 2>&1
    rc=$?
    a=$(du -sm "$v" | cut -f1)
    record "$group" "$venv" $((a - b)) $(( $(date +%s) - t0 )) $rc "$sha"
    [ $rc -eq 0 ] && echo "$sha" > "$v/.group-$group" || { echo "peers: $group failed (rc $rc), see $dir/pip-$group.log" >&2; tail -5 "$dir/pip-$group.log" >&2; }
  }
  while IFS= read -r line; do
    case "$line" in
      "# group: "*) flush; group=${line#\# group: }; lines=() ;;
      ""|\#*) ;;
      *) lines+=("$line") ;;
    esac
  done < "$req"
  flush
  "$v/bin/pip" freeze > "$dir/freeze-$venv.txt" 2>/dev/null
}

install_file "$here/requirements.txt" main
install_file "$here/requirements-tf.txt" tf
echo "$dir"
