#!/usr/bin/env bash
# Build the helm CLI for the chart tests (tests/live/test_helm_chart.py) from the Go module proxy.
#
# The version comes from the wrapper module tools/helm (go.mod + go.sum, a `tool` dependency on
# helm.sh/helm/v4/cmd/helm). The binary is cached outside the repository, in
#   ${GPU_AUDIT_CACHE:-$HOME/.cache/gpu-audit}/helm/<helm version>-<sha256(go.mod+go.sum)[:12]>/helm
# and the build is skipped when it is already there.
#
# stdout: only the directory that holds the binary. Progress and errors go to stderr.
# Environment: GO (go command to use), GPU_AUDIT_CACHE (cache root).
set -euo pipefail

repo_root=$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")/.." && pwd)
GO_TOOL_LOG_PREFIX=build-helm
# shellcheck source=lib/go-tool-build.sh
source "$repo_root/scripts/lib/go-tool-build.sh"

mod_dir="$repo_root/tools/helm"
go_tool_init helm "$mod_dir" "$(go_tool_required_version "$mod_dir" helm.sh/helm/v4)"
helm_version=$GO_TOOL_VERSION
go_tool_exit_if_cached helm
go_tool_find_go
go_tool_begin helm

# Version stamping as helm's Makefile does for a tagged release (empty metadata, clean tree);
# the commit is not known from the module proxy.
pkg=helm.sh/helm/v4/internal/version
ldflags="-s -w -X $pkg.version=$helm_version -X $pkg.metadata= -X $pkg.gitTreeState=clean"

log "helm $helm_version from $mod_dir (a cold build takes 3-6 min on 2 cores)"
go_tool_build "$GO_TOOL_TMP/helm" helm.sh/helm/v4/cmd/helm "$ldflags"
"$GO_TOOL_TMP/helm" version >&2 || die "the built helm does not run"

go_tool_finish
