# Shared steps of the scripts that build a Go tool from a wrapper module (tools/<name>/go.mod
# + go.sum) through the Go module proxy and cache the binaries outside the repository, in
#   ${GPU_AUDIT_CACHE:-$HOME/.cache/gpu-audit}/<name>/<version>-<sha256(go.mod+go.sum)[:12]>/
# Sourced (not run) by scripts/build-control-plane.sh and scripts/build-helm.sh.
#
# Contract with the caller: stdout carries only the cache directory; everything else goes to
# stderr. The caller sets GO_TOOL_LOG_PREFIX before sourcing, then:
#   go_tool_init NAME MOD_DIR VERSION   sets GO_TOOL_OUT (the cache directory)
#   go_tool_exit_if_cached BIN...       prints GO_TOOL_OUT and exits 0 when every BIN is there
#   go_tool_find_go                     sets GO_TOOL_GO, or dies saying what it looked for
#   go_tool_begin BIN...                takes the cache lock, then GO_TOOL_TMP is the build dir
#   go_tool_build OUT PACKAGE LDFLAGS [TAGS]
#   go_tool_finish                      moves GO_TOOL_TMP to GO_TOOL_OUT and prints it
# Environment: GO (go command to use), GPU_AUDIT_CACHE (cache root).

log() { printf '%s: %s\n' "${GO_TOOL_LOG_PREFIX:?}" "$*" >&2; }
die() { log "error: $*"; exit 1; }

go_tool_init() { # NAME MOD_DIR VERSION
  GO_TOOL_NAME=$1
  GO_TOOL_MOD_DIR=$2
  GO_TOOL_VERSION=$3
  [[ -f "$GO_TOOL_MOD_DIR/go.mod" && -f "$GO_TOOL_MOD_DIR/go.sum" ]] \
    || die "missing $GO_TOOL_MOD_DIR/go.mod or go.sum"
  [[ -n "$GO_TOOL_VERSION" ]] || die "no version for $GO_TOOL_NAME in $GO_TOOL_MOD_DIR/go.mod"
  local mod_hash
  mod_hash=$(cat "$GO_TOOL_MOD_DIR/go.mod" "$GO_TOOL_MOD_DIR/go.sum" | sha256sum | cut -c1-12)
  GO_TOOL_CACHE_ROOT=${GPU_AUDIT_CACHE:-${HOME:?HOME is not set}/.cache/gpu-audit}
  GO_TOOL_OUT="$GO_TOOL_CACHE_ROOT/$GO_TOOL_NAME/$GO_TOOL_VERSION-$mod_hash"
}

# The version a wrapper module requires of MODULE (first `MODULE vX...` line of go.mod).
go_tool_required_version() { # MOD_DIR MODULE
  awk -v mod="$2" '$1 == mod && $2 ~ /^v[0-9]/ { print $2; exit }' "$1/go.mod"
}

_go_tool_have() { # BIN...
  local bin
  for bin in "$@"; do
    [[ -x "$GO_TOOL_OUT/$bin" ]] || return 1
  done
}

go_tool_exit_if_cached() { # BIN...
  if _go_tool_have "$@"; then
    log "cached: $GO_TOOL_OUT"
    printf '%s\n' "$GO_TOOL_OUT"
    exit 0
  fi
}

# Go is looked for only when a build is needed, so a warm cache works without it.
go_tool_find_go() {
  GO_TOOL_GO=${GO:-}
  if [[ -z "$GO_TOOL_GO" ]]; then
    if command -v go >/dev/null 2>&1; then
      GO_TOOL_GO=$(command -v go)
    elif [[ -x /usr/local/go/bin/go ]]; then
      GO_TOOL_GO=/usr/local/go/bin/go
    fi
  fi
  if [[ -z "$GO_TOOL_GO" ]] || ! "$GO_TOOL_GO" version >/dev/null 2>&1; then
    die "Go is not installed (looked for \$GO, go on PATH, /usr/local/go/bin/go);" \
        "it is needed to build $GO_TOOL_NAME $GO_TOOL_VERSION"
  fi
  log "using $("$GO_TOOL_GO" version)"
}

_go_tool_cleanup() { rm -rf -- "$GO_TOOL_TMP"; }

go_tool_begin() { # BIN...
  mkdir -p "$GO_TOOL_CACHE_ROOT/$GO_TOOL_NAME"
  # One build at a time per tool: a second caller waits, then finds the binaries.
  exec 9>"$GO_TOOL_CACHE_ROOT/$GO_TOOL_NAME/.build.lock"
  flock 9
  if _go_tool_have "$@"; then
    log "built by a concurrent run: $GO_TOOL_OUT"
    printf '%s\n' "$GO_TOOL_OUT"
    exit 0
  fi
  GO_TOOL_TMP=$(mktemp -d "$GO_TOOL_CACHE_ROOT/$GO_TOOL_NAME/.tmp-$GO_TOOL_VERSION-XXXXXX")
  trap '_go_tool_cleanup' EXIT
}

# The commit time of MODULE's version as the module proxy's .info gives it (RFC 3339, UTC),
# for reproducible build dates; the epoch when unknown.
go_tool_module_time() { # MODULE
  local when
  when=$(cd "$GO_TOOL_MOD_DIR" \
    && "$GO_TOOL_GO" list -m -f '{{if .Time}}{{.Time.UTC.Format "2006-01-02T15:04:05Z"}}{{end}}' \
      "$1" 2>/dev/null) || when=""
  printf '%s\n' "${when:-1970-01-01T00:00:00Z}"
}

go_tool_build() { # OUT PACKAGE LDFLAGS [TAGS]
  local start=$SECONDS
  log "building $2 -> $1"
  (cd "$GO_TOOL_MOD_DIR" && CGO_ENABLED=0 "$GO_TOOL_GO" build -mod=readonly -trimpath \
    -tags "${4:-}" -ldflags "all=$3" -o "$1" "$2") >&2 \
    || die "go build of $2 failed (see the output above)"
  log "built $2 in $((SECONDS - start))s"
}

go_tool_finish() {
  rm -rf -- "$GO_TOOL_OUT"
  mv -- "$GO_TOOL_TMP" "$GO_TOOL_OUT"
  trap - EXIT
  chmod 755 "$GO_TOOL_OUT"
  log "done: $GO_TOOL_OUT"
  printf '%s\n' "$GO_TOOL_OUT"
}
