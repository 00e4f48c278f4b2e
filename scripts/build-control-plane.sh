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
# The shared steps (cache key, lock, Go lookup, build) are in scripts/lib/go-tool-build.sh.
set -euo pipefail

repo_root=$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")/.." && pwd)
GO_TOOL_LOG_PREFIX=build-control-plane
# shellcheck source=lib/go-tool-build.sh
source "$repo_root/scripts/lib/go-tool-build.sh"

mod_dir="$repo_root/tools/k8s-bin"
go_tool_init k8s-bin "$mod_dir" "$(go_tool_required_version "$mod_dir" k8s.io/kubernetes)"
k8s_version=$GO_TOOL_VERSION
go_tool_exit_if_cached kube-apiserver etcd
go_tool_find_go
go_tool_begin kube-apiserver etcd

# Version stamping as upstream hack/lib/version.sh does, on the module import paths.
# buildDate is the release's commit time from the module proxy's .info, for reproducibility.
ver=${k8s_version#v}
major=${ver%%.*}
minor=${ver#*.}
minor=${minor%%.*}
build_date=$(go_tool_module_time k8s.io/kubernetes)
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

log "kube-apiserver $k8s_version + etcd from $mod_dir (cold builds take 10-25 min on 2 cores)"
go_tool_build "$GO_TOOL_TMP/kube-apiserver" k8s.io/kubernetes/cmd/kube-apiserver "$ldflags" selinux,notest
go_tool_build "$GO_TOOL_TMP/etcd" go.etcd.io/etcd/server/v3 "$ldflags" selinux,notest

"$GO_TOOL_TMP/kube-apiserver" --version >&2 || die "the built kube-apiserver does not run"
"$GO_TOOL_TMP/etcd" --version >&2 || die "the built etcd does not run"

go_tool_finish
