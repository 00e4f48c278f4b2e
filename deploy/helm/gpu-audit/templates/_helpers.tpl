{{/* Names and labels. */}}
{{- define "gpu-audit.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 52 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 52 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "gpu-audit.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- .Values.serviceAccount.name | default (include "gpu-audit.fullname" .) -}}
{{- else -}}
{{- .Values.serviceAccount.name | required "serviceAccount.name is required when serviceAccount.create is false" -}}
{{- end -}}
{{- end -}}

{{- define "gpu-audit.selectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "gpu-audit.labels" -}}
{{ include "gpu-audit.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{- define "gpu-audit.image" -}}
{{- if .Values.image.digest -}}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest -}}
{{- else -}}
{{- printf "%s:%s" .Values.image.repository (.Values.image.tag | default .Chart.AppVersion) -}}
{{- end -}}
{{- end -}}

{{- define "gpu-audit.historyClaim" -}}
{{- .Values.history.persistence.existingClaim | default (printf "%s-history" (include "gpu-audit.fullname" .)) -}}
{{- end -}}

{{/*
The enabled checks, as `scan --only/--skip/--category` selects them, from the generated
files/read-access.yaml (`gpu-audit rbac --chart-index`). Unknown ids or categories fail the
render, as they would fail the scan. Output: a JSON list of the enabled check ids.
*/}}
{{- define "gpu-audit.enabledChecks" -}}
{{- $index := .Files.Get "files/read-access.yaml" | fromYaml -}}
{{- $only := .Values.checks.only | default list -}}
{{- $skip := .Values.checks.skip | default list -}}
{{- $known := list -}}
{{- range $id, $check := $index.checks -}}
{{- $known = concat $known $check.categories -}}
{{- end -}}
{{- $categories := list -}}
{{- range .Values.checks.categories -}}
{{- if not (has (lower .) $known) -}}
{{- fail (printf "checks.categories: unknown category %q (expected one of %s)" . (join ", " ($known | uniq | sortAlpha))) -}}
{{- end -}}
{{- $categories = append $categories (lower .) -}}
{{- end -}}
{{- range (concat $only $skip) -}}
{{- if not (hasKey $index.checks .) -}}
{{- fail (printf "checks: unknown check id %q (see `gpu-audit checks list`)" .) -}}
{{- end -}}
{{- end -}}
{{- $enabled := list -}}
{{- range $id, $check := $index.checks -}}
{{- $wanted := and (or (empty $only) (has $id $only)) (not (has $id $skip)) -}}
{{- if and $wanted $categories -}}
{{- $inCategory := false -}}
{{- range $check.categories -}}
{{- if has . $categories }}{{ $inCategory = true }}{{ end -}}
{{- end -}}
{{- $wanted = $inCategory -}}
{{- end -}}
{{- if $wanted }}{{ $enabled = append $enabled $id }}{{ end -}}
{{- end -}}
{{- $enabled | toJson -}}
{{- end -}}

{{/*
ClusterRole rules: list on exactly what the enabled checks and the report's diagnostics read,
one rule per API group (as `gpu-audit rbac` prints them).
*/}}
{{- define "gpu-audit.readRules" -}}
{{- $index := .Files.Get "files/read-access.yaml" | fromYaml -}}
{{- $grants := $index.always -}}
{{- range (include "gpu-audit.enabledChecks" . | fromJsonArray) -}}
{{- $grants = concat $grants (get $index.checks .).reads -}}
{{- end -}}
{{- $byGroup := dict -}}
{{- range ($grants | uniq | sortAlpha) -}}
{{- $parts := splitList "/" . -}}
{{- $group := first $parts -}}
{{- $_ := set $byGroup $group (append (get $byGroup $group | default list) (last $parts)) -}}
{{- end -}}
{{- range $group := (keys $byGroup | sortAlpha) }}
- apiGroups: [{{ $group | quote }}]
  resources: {{ get $byGroup $group | toJson }}
  verbs: ["list"]
{{- end -}}
{{- end -}}
