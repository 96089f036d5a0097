# shellcheck shell=bash
# Where the offline schemas live (../shared/schemas beside the repository: see its README).
# A clone elsewhere (CI's clean clone, say) finds them through HOOKSTREAM_SHARED_DIR or the
# workplace's /work/shared. Prints the directory, or fails naming every place it looked.
shared_dir() {
  local root="$1" d
  for d in ${HOOKSTREAM_SHARED_DIR:+"$HOOKSTREAM_SHARED_DIR"} "$root/../shared" /work/shared; do
    if [[ -d "$d/schemas" ]]; then
      (cd "$d" && pwd)
      return 0
    fi
  done
  echo "no shared/schemas found (looked in ${HOOKSTREAM_SHARED_DIR:+$HOOKSTREAM_SHARED_DIR, }$root/../shared, /work/shared); set HOOKSTREAM_SHARED_DIR" >&2
  return 1
}
