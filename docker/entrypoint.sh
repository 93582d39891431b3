#!/bin/bash
# modelgate-entrypoint: the container's entrypoint. Runs as a Kubernetes init
# container or a KServe storage initializer (called as `SRC DEST`, e.g.
# `/mnt/source /mnt/models`) and lets the model server start only on weights
# that passed `modelgate check` under the operator's policy.
#
#   modelgate-entrypoint SRC DEST   copy SRC into a private staging directory
#                                   inside DEST, check the copy, and only if it
#                                   passes move it into DEST
#   modelgate-entrypoint SRC        verify SRC in place (read-only volumes)
#
# SRC is a local directory or file: a mounted volume, or the volume an earlier
# init container downloaded into. `file:///abs/path` and
# `modelgate:///abs/path` name local paths too (the latter for a KServe
# ClusterStorageContainer). Nothing is downloaded: any other `scheme://` URI
# is refused (exit 2).
#
# Environment:
#   MODELGATE_POLICY       policy file (default /etc/modelgate/policy.yaml),
#                          mounted from a ConfigMap; never read from SRC/DEST
#   MODELGATE_JSON_REPORT  also write the JSON report there (optional)
#   MODELGATE_BIN          the modelgate program (default: modelgate on PATH)
#
# Exit codes (the modelgate contract): 0 passed (DEST populated, or already
# held exactly these files), 1 rejected (nothing placed in DEST), 2 could not
# judge (usage, remote URI, missing or bad policy, I/O, DEST not empty).
set -euo pipefail
umask 022

readonly prog=modelgate-entrypoint
readonly staging_prefix=.modelgate-staging.
mg="${MODELGATE_BIN:-modelgate}"
policy="${MODELGATE_POLICY:-/etc/modelgate/policy.yaml}"
json_report="${MODELGATE_JSON_REPORT:-}"
staging=""
rc=0

log() { printf '%s: %s\n' "$prog" "$*" >&2; }
die() {
  local code="$1"
  shift
  log "$*"
  exit "$code"
}
usage() {
  cat >&2 <<'EOF'
usage: modelgate-entrypoint SRC [DEST]
  SRC DEST  copy SRC into DEST only if `modelgate check --policy $MODELGATE_POLICY` passes
  SRC       verify SRC in place
SRC: a local path, file:///path or modelgate:///path (no downloads).
Exit codes: 0 passed, 1 rejected (DEST untouched), 2 could not judge.
EOF
}

cleanup() {
  if [ -n "$staging" ] && [ -d "$staging" ] && [ ! -L "$staging" ]; then
    chmod -R u+rwx -- "$staging" 2>/dev/null || true
    rm -rf -- "$staging" || log "could not remove the staging directory $(printf '%q' "$staging")"
  fi
}
trap cleanup EXIT
trap 'exit 143' TERM
trap 'exit 130' INT

# inside PATH ROOT: PATH is ROOT or below it (both absolute and resolved).
inside() {
  [ "$2" = / ] || [ "$1" = "$2" ] || case "$1" in "$2"/*) true ;; *) false ;; esac
}

# local_path URI: prints the local path a source or destination names, or
# exits 2 for a URI the entrypoint would have to download.
local_path() {
  local uri="$1" what="$2" path
  case "$uri" in
    file://* | modelgate://*)
      path="${uri#*://}"
      case "$path" in
        /*) ;;
        *) die 2 "$what $(printf '%q' "$uri"): a file:// or modelgate:// URI needs an absolute path (file:///mnt/...)" ;;
      esac
      ;;
    *)
      if [[ "$uri" =~ ^[A-Za-z][A-Za-z0-9+.-]*:// ]]; then
        die 2 "$what $(printf '%q' "$uri") is remote: modelgate-entrypoint never downloads." \
          "Mount the volume (PVC) and pass its path, or run this container after the" \
          "init container that downloads (e.g. the KServe storage initializer) and pass" \
          "the directory it wrote."
      fi
      path="$uri"
      ;;
  esac
  [ -n "$path" ] || die 2 "$what is empty"
  printf '%s' "$path"
}

# reject_links DIR: a published model tree holds only regular files and
# directories. A symbolic link would be followed by the model server in its
# own filesystem (the link's target is not what was checked); FIFOs and
# devices are never model files. Whatever the policy says, they reject.
reject_links() {
  local bad=0 entry
  while IFS= read -r -d '' entry; do
    log "rejected: $(printf '%q' "${entry#"$1"/}") is not a regular file or directory (symbolic link, FIFO, socket or device)"
    bad=1
  done < <(find "$1" -mindepth 1 ! -type f ! -type d -print0)
  return "$bad"
}

# run_check DIR PATH: `modelgate check` under the policy, from DIR on PATH
# (relative paths keep the report readable); its exit code in `rc`. The
# report goes to stdout, i.e. the container's log.
run_check() {
  local -a extra=()
  [ -z "$json_report" ] || extra=(--json-output "$json_report")
  rc=0
  (cd -- "$1" && "$mg" check --policy "$policy" "${extra[@]}" -- "$2") || rc=$?
}

# entries DIR [SKIP]: the NUL-separated, sorted top-level names in DIR,
# leaving out SKIP.
entries() {
  find "$1" -mindepth 1 -maxdepth 1 ! -name "${2:-/}" -printf '%f\0' | sort -z
}

# same_tree A B: B holds exactly the top-level entries of A (B's own staging
# directory aside), byte for byte, symbolic links compared as links.
same_tree() {
  local name
  cmp -s <(entries "$1") <(entries "$2" "$(basename -- "$1")") || return 1
  while IFS= read -r -d '' name; do
    diff -r -q --no-dereference -- "$1/$name" "$2/$name" >/dev/null 2>&1 || return 1
  done < <(entries "$1")
}

# ---- arguments ------------------------------------------------------------
case "${1:-}" in
  -h | --help) usage; exit 0 ;;
  --) shift ;;
  -*) usage; die 2 "unknown option $(printf '%q' "$1")" ;;
esac
if [ "$#" -lt 1 ] || [ "$#" -gt 2 ]; then
  usage
  die 2 "expected SRC [DEST], got $# arguments"
fi
src="$(local_path "$1" source)"
dest=""
[ "$#" -lt 2 ] || dest="$(local_path "$2" destination)"

command -v -- "$mg" >/dev/null 2>&1 || die 2 "modelgate program $(printf '%q' "$mg") not found (MODELGATE_BIN / PATH)"
[ -e "$src" ] || die 2 "source $(printf '%q' "$src") does not exist (is the volume mounted?)"
[ -d "$src" ] || [ -f "$src" ] || die 2 "source $(printf '%q' "$src") is neither a directory nor a regular file"
src_abs="$(realpath -e -- "$src")" || die 2 "cannot resolve source $(printf '%q' "$src")"

# The policy is the operator's, mounted from a ConfigMap: never one shipped
# inside the model tree, which would let the uploader waive their own findings.
if [ ! -f "$policy" ] || [ ! -r "$policy" ]; then
  die 2 "policy $(printf '%q' "$policy") is not a readable file: mount the policy ConfigMap and set MODELGATE_POLICY"
fi
policy="$(realpath -e -- "$policy")"
inside "$policy" "$src_abs" && die 2 "policy $(printf '%q' "$policy") lies inside the source tree; it must come from the operator (a ConfigMap), not the model"
if [ -n "$json_report" ]; then
  case "$json_report" in /*) ;; *) json_report="$PWD/$json_report" ;; esac
fi
# A broken policy is found before any copying (modelgate prints line:column).
"$mg" policy lint "$policy" >&2 || die 2 "policy $(printf '%q' "$policy") is invalid; nothing was checked"

# ---- verify in place --------------------------------------------------------
if [ -z "$dest" ]; then
  log "verifying $(printf '%q' "$src_abs") in place (sound only if nothing can write to it)"
  if [ -d "$src_abs" ]; then
    run_check "$src_abs" .
    if [ "$rc" -le 1 ] && ! reject_links "$src_abs"; then rc=1; fi
  else
    run_check "$(dirname -- "$src_abs")" "$(basename -- "$src_abs")"
  fi
  case "$rc" in
    0) log "passed: $(printf '%q' "$src_abs")" ;;
    1) log "rejected: $(printf '%q' "$src_abs") must not be served" ;;
    *) log "could not judge $(printf '%q' "$src_abs") (modelgate exit $rc)"; rc=2 ;;
  esac
  exit "$rc"
fi

# ---- copy, check the copy, then publish ---------------------------------------
# The check runs on a private copy, never on the source: a writer who swaps a
# file in SRC after the check cannot get the swapped bytes into DEST.
mkdir -p -- "$dest" || die 2 "cannot create destination $(printf '%q' "$dest")"
dest_abs="$(realpath -e -- "$dest")" || die 2 "cannot resolve destination $(printf '%q' "$dest")"
[ -d "$dest_abs" ] || die 2 "destination $(printf '%q' "$dest") is not a directory"
if inside "$dest_abs" "$src_abs" || inside "$src_abs" "$dest_abs"; then
  die 2 "source $(printf '%q' "$src_abs") and destination $(printf '%q' "$dest_abs") overlap"
fi
inside "$policy" "$dest_abs" && die 2 "policy $(printf '%q' "$policy") lies inside the destination"

# Staging directories left by an interrupted run are ours (by name): remove.
while IFS= read -r -d '' old; do
  [ -L "$old" ] && { rm -f -- "$old"; continue; }
  chmod -R u+rwx -- "$old" 2>/dev/null || true
  rm -rf -- "$old" || die 2 "cannot remove the old staging directory $(printf '%q' "$old")"
done < <(find "$dest_abs" -mindepth 1 -maxdepth 1 -name "${staging_prefix}*" -print0)
dest_was_empty=1
[ -z "$(find "$dest_abs" -mindepth 1 -maxdepth 1 -print -quit)" ] || dest_was_empty=0

staging="$(mktemp -d -- "$dest_abs/${staging_prefix}XXXXXX")" || die 2 "cannot create a staging directory in $(printf '%q' "$dest_abs")"
log "copying $(printf '%q' "$src_abs") to $(printf '%q' "$staging")"
if [ -d "$src_abs" ]; then
  # -P: symbolic links are copied as links (and then rejected), never followed.
  cp -R -P -- "$src_abs/." "$staging/" || die 2 "copying $(printf '%q' "$src_abs") failed; nothing was placed in the destination"
else
  cp -- "$src_abs" "$staging/$(basename -- "$src")" || die 2 "copying $(printf '%q' "$src_abs") failed; nothing was placed in the destination"
fi
[ -n "$(find "$staging" -mindepth 1 ! -type d -print -quit)" ] ||
  die 2 "source $(printf '%q' "$src_abs") holds no files (wrong path?)"
# Top-level names with the staging prefix are reserved: a later run would
# take a published one for its own leftover.
[ -z "$(find "$staging" -mindepth 1 -maxdepth 1 -name "${staging_prefix}*" -print -quit)" ] ||
  die 2 "source $(printf '%q' "$src_abs") holds a top-level entry named ${staging_prefix}*, a name the entrypoint reserves"
# Readable by the model server whatever its uid; writable by no one else.
find "$staging" -mindepth 1 -type d -exec chmod 0755 {} +
find "$staging" -mindepth 1 -type f -exec chmod 0644 {} +
# Durable before it is published (fsync every file and directory).
find "$staging" \( -type f -o -type d \) -exec sync -- {} +

run_check "$staging" .
if [ "$rc" -le 1 ] && ! reject_links "$staging"; then rc=1; fi
case "$rc" in
  0) ;;
  1) die 1 "rejected: nothing was placed in $(printf '%q' "$dest_abs")" ;;
  *) die 2 "could not judge (modelgate exit $rc); nothing was placed in $(printf '%q' "$dest_abs")" ;;
esac

if [ "$dest_was_empty" -eq 0 ]; then
  # An init container re-run (e.g. after a node restart) finds its own earlier
  # result: fine if identical. Anything else would mix unchecked files with
  # checked ones, so it is refused and left untouched.
  if same_tree "$staging" "$dest_abs"; then
    log "passed: $(printf '%q' "$dest_abs") already holds exactly these checked files; left as is"
    exit 0
  fi
  die 2 "destination $(printf '%q' "$dest_abs") is not empty and differs from the checked copy;" \
    "refusing to mix files (use a fresh emptyDir); nothing was placed"
fi

# Publish: rename each checked entry into DEST (same file system, no copy).
while IFS= read -r -d '' name; do
  mv -T -- "$staging/$name" "$dest_abs/$name" || die 2 "cannot move $(printf '%q' "$name") into $(printf '%q' "$dest_abs")"
done < <(entries "$staging")
rmdir -- "$staging"
staging=""
sync -- "$dest_abs"
log "passed: published $(printf '%q' "$src_abs") to $(printf '%q' "$dest_abs")"
