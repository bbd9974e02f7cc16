{{/* rewind keeps member credentials and its snapshot key in rewind-system. */}}
{{- define "rewind.checkNamespace" -}}
{{- if ne .Release.Namespace "rewind-system" -}}
{{- fail (printf "rewind must be installed in the namespace rewind-system (it keeps member kubeconfigs and its snapshot key there), not %q: helm install rewind charts/rewind -n rewind-system --create-namespace" .Release.Namespace) -}}
{{- end -}}
{{- end -}}

{{- define "rewind.labels" -}}
app.kubernetes.io/name: rewind
app.kubernetes.io/part-of: rewind
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{- define "rewind.selectorLabels" -}}
app.kubernetes.io/name: rewind
app.kubernetes.io/component: controller
{{- end -}}

{{- define "rewind.image" -}}
{{- if .Values.image.digest -}}
{{ .Values.image.repository }}@{{ .Values.image.digest }}
{{- else -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}
{{- end -}}

{{/* The rules of a generated role file (config/rbac, copied by make generate) by kind. */}}
{{- define "rewind.rulesOf" -}}
{{- $kind := index . 1 -}}
{{- range $doc := splitList "\n---\n" (index . 0) -}}
{{- $o := fromYaml $doc -}}
{{- if and $o (eq (get $o "kind") $kind) -}}
{{ toYaml (get $o "rules") }}
{{- end -}}
{{- end -}}
{{- end -}}
