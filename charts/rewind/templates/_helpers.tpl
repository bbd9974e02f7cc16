{{/* rewind keeps member credentials and its snapshot key in rewind-system; in a member, its
records, its journals and the agent's identity (config/member). */}}
{{- define "rewind.checkNamespace" -}}
{{- if ne .Release.Namespace "rewind-system" -}}
{{- if .Values.agent.enabled -}}
{{- fail (printf "rewind's agent must be installed in the namespace rewind-system (the member identity rewind-member and rewind's records live there), not %q: helm install rewind-agent charts/rewind -n rewind-system --create-namespace --set agent.enabled=true --set agent.clusterName=NAME" .Release.Namespace) -}}
{{- else -}}
{{- fail (printf "rewind must be installed in the namespace rewind-system (it keeps member kubeconfigs and its snapshot key there), not %q: helm install rewind charts/rewind -n rewind-system --create-namespace" .Release.Namespace) -}}
{{- end -}}
{{- end -}}
{{- include "rewind.checkAgent" . -}}
{{- end -}}

{{/* Values that contradict the mode: an agent without its member's name, hub values given to
an agent, an agent's name given to a hub install (which would install the hub in a member). */}}
{{- define "rewind.checkAgent" -}}
{{- $a := .Values.agent -}}
{{- if $a.enabled -}}
{{- if not $a.clusterName -}}
{{- fail "agent.clusterName is required with agent.enabled=true: set it to the member's name in the hub, as given to `rewind clusters join NAME` (--set agent.clusterName=NAME)" -}}
{{- end -}}
{{- if or (gt (len $a.clusterName) 49) (not (regexMatch "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$" $a.clusterName)) -}}
{{- fail (printf "agent.clusterName %q is not a pull member's name: use the NAME given to `rewind clusters join NAME`, a DNS label (lowercase letters, digits and '-', starting and ending with a letter or digit) of at most 49 characters, as its hub namespace rewind-member-NAME must fit in 63" $a.clusterName) -}}
{{- end -}}
{{- if .Values.namespaces -}}
{{- fail "namespaces is a hub value (the controller's namespaces) and an agent (agent.enabled=true) installs no controller: remove namespaces from the agent's values" -}}
{{- end -}}
{{- if or .Values.metrics.serviceMonitor.enabled .Values.metrics.prometheusRule.enabled -}}
{{- fail "metrics.serviceMonitor and metrics.prometheusRule watch the hub's controller, which an agent (agent.enabled=true) does not install: set them to false in the agent's values" -}}
{{- end -}}
{{- else if $a.clusterName -}}
{{- fail (printf "agent.clusterName is %q but agent.enabled is false, which installs the hub (CRDs and controller), not the agent: add --set agent.enabled=true to install the agent of a pull member, or remove agent.clusterName to install the hub" $a.clusterName) -}}
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

{{- define "rewind.agentSelectorLabels" -}}
app.kubernetes.io/name: rewind
app.kubernetes.io/component: agent
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
