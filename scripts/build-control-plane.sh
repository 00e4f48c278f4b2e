#!/usr/bin/env bash
# Build kube-apiserver and etcd for the live test suite from the Go module proxy.
#
# The versions come from the wrapper module tools/k8s-bin (go.mod + go.sum). The binaries are
# cached outside the repository, in
#   ${GPU_AUDIT_CACHE:-$HOME/.cache/gpu-audit}/k8s-bin/<k8s version>-<sha256(go.mod+go.sum)[:12]>/
# and the build is skipped when both are already there.
#
# stdout: only the directory that holds the binaries. Progress and errors go to stderr.
# Environment: GO (go command to use), GPU_AUDIT_CACHE (cache root), DBG=1 (keep symbols).
set -euo pipefail

log() { printf 'build-control-plane: %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

repo_root=$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")/.." && pwd)
mod_dir="$repo_root/tools/k8s-bin"
[[ -f "$mod_dir/go.mod" && -f "$mod_dir/go.sum" ]] \
  || die "missing $mod_dir/go.mod or go.sum"

k8s_version=$(awk '$1 == "k8s.io/kubernetes" && $2 ~ /^v[0-9]/ { print $2; exit }' "$mod_dir/go.mod")
[[ -n "$k8s_version" ]] || die "no k8s.io/kubernetes requirement in $mod_dir/go.mod"
mod_hash=$(cat "$mod_dir/go.mod" "$mod_dir/go.sum" | sha256sum | cut -c1-12)

cache_root=${GPU_AUDIT_CACHE:-${HOME:?HOME is not set}/.cache/gpu-audit}
out_dir="$cache_root/k8s-bin/$k8s_version-$mod_hash"

have_binaries() { [[ -x "$out_dir/kube-apiserver" && -x "$out_dir/etcd" ]]; }

if have_binaries; then
  log "cached: $out_dir"
  printf '%s\n' "$out_dir"
  exit 0
fi

# Find Go only when a build is needed.
go_cmd=${GO:-}
if [[ -z "$go_cmd" ]]; then
  if command -v go >/dev/null 2>&1; then
    go_cmd=$(command -v go)
  elif [[ -x /usr/local/go/bin/go ]]; then
    go_cmd=/usr/local/go/bin/go
  fi
fi
if [[ -z "$go_cmd" ]] || ! "$go_cmd" version >/dev/null 2>&1; then
  die "Go is not installed (looked for \$GO, go on PATH, /usr/local/go/bin/go);" \
      "it is needed to build kube-apiserver $k8s_version and etcd"
fi
log "using $("$go_cmd" version)"

mkdir -p "$cache_root/k8s-bin"
# One build at a time per cache: a second caller waits, then finds the binaries.
exec 9>"$cache_root/k8s-bin/.build.lock"
flock 9
if have_binaries; then
  log "built by a concurrent run: $out_dir"
  printf '%s\n' "$out_dir"
  exit 0
fi

tmp_dir=$(mktemp -d "$cache_root/k8s-bin/.tmp-$k8s_version-XXXXXX")
trap 'rm -rf -- "$tmp_dir"' EXIT

# Version stamping as upstream hack/lib/version.sh does, on the module import paths.
# buildDate is the release's commit time from the module proxy's .info, for reproducibility.
ver=${k8s_version#v}
major=${ver%%.*}
minor=${ver#*.}
minor=${minor%%.*}
build_date=$(cd "$mod_dir" \
  && "$go_cmd" list -m -f '{{if .Time}}{{.Time.UTC.Format "2006-01-02T15:04:05Z"}}{{end}}' \
    k8s.io/kubernetes 2>/dev/null) || build_date=""
build_date=${build_date:-1970-01-01T00:00:00Z}
ldflags=""
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  ldflags+=" -X $pkg.gitVersion=$k8s_version"
  ldflags+=" -X $pkg.gitMajor=$major"
  ldflags+=" -X $pkg.gitMinor=$minor"
  ldflags+=" -X $pkg.gitCommit="  # not known from the module proxy; better empty than $Format:%H$
  ldflags+=" -X $pkg.gitTreeState=clean"
  ldflags+=" -X $pkg.buildDate=$build_date"
done
if [[ "${DBG:-}" != 1 ]]; then
  ldflags="-s -w$ldflags"
fi

build() { # build OUTPUT PACKAGE
  local start=$SECONDS
  log "building $2 -> $1"
  (cd "$mod_dir" && CGO_ENABLED=0 "$go_cmd" build -mod=readonly -trimpath \
    -tags selinux,notest -ldflags "all=$ldflags" -o "$1" "$2") >&2 \
    || die "go build of $2 failed (see the output above)"
  log "built $2 in $((SECONDS - start))s"
}

log "kube-apiserver $k8s_version + etcd from $mod_dir (cold builds take 10-25 min on 2 cores)"
build "$tmp_dir/kube-apiserver" k8s.io/kubernetes/cmd/kube-apiserver
build "$tmp_dir/etcd" go.etcd.io/etcd/server/v3

"$tmp_dir/kube-apiserver" --version >&2 || die "the built kube-apiserver does not run"
"$tmp_dir/etcd" --version >&2 || die "the built etcd does not run"

rm -rf -- "$out_dir"
mv -- "$tmp_dir" "$out_dir"
trap - EXIT
chmod 755 "$out_dir"
log "done: $out_dir"
printf '%s\n' "$out_dir"
