{{- define "kubesoda.name" -}}{{ .Release.Name }}{{- end -}}
{{- define "kubesoda.image" -}}{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}{{- end -}}
{{- define "kubesoda.labels" -}}
app.kubernetes.io/name: kubesoda
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ .Chart.Name }}-{{ .Chart.Version }}
{{- end -}}
{{- define "kubesoda.containerSecurity" -}}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
capabilities: {drop: [ALL]}
{{- end -}}
{{- define "kubesoda.peering" -}}
{{- if eq .Values.operator.peering "auto" -}}{{ printf "%s-%s" .Release.Name .Release.Namespace | trunc 253 | trimSuffix "-" }}{{- else -}}{{ .Values.operator.peering }}{{- end -}}
{{- end -}}
{{- define "kubesoda.extenderHost" -}}{{ include "kubesoda.name" . }}-extender.{{ .Release.Namespace }}.svc{{- end -}}
{{- define "kubesoda.extenderTLSSecret" -}}{{ .Values.extender.tls.secretName | default (printf "%s-extender-tls" (include "kubesoda.name" .)) }}{{- end -}}
{{- /* Pod conventions shared by the operator, the extender and the scheduler (issue 48): pull
secrets (the chart's and an umbrella chart's global.imagePullSecrets, names or {name: ...}),
priority, placement. Called with (dict "root" $ "c" <the component's values> "component" <name>). */}}
{{- define "kubesoda.imagePullSecrets" -}}
{{- $names := list }}
{{- $global := .Values.global | default dict }}
{{- range concat (.Values.imagePullSecrets | default list) ($global.imagePullSecrets | default list) }}
{{- $n := "" }}{{ if kindIs "string" . }}{{ $n = . }}{{ else }}{{ $n = .name }}{{ end }}
{{- if and $n (not (has $n $names)) }}{{ $names = append $names $n }}{{ end }}
{{- end }}
{{- range $names }}
- name: {{ . }}
{{- end }}
{{- end -}}
{{- define "kubesoda.podMetadata" -}}
{{- /* the chart's labels win over podLabels of the same key (the selectors rely on them) */}}
{{- $labels := merge (dict "app.kubernetes.io/component" .component) (fromYaml (include "kubesoda.labels" .root)) (deepCopy (.c.podLabels | default dict)) (deepCopy (.root.Values.podLabels | default dict)) }}
labels: {{- toYaml $labels | nindent 2 }}
{{- with merge (deepCopy (.c.podAnnotations | default dict)) (deepCopy (.root.Values.podAnnotations | default dict)) }}
annotations: {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}
{{- define "kubesoda.podPlacement" -}}
{{- $root := .root }}
{{- with include "kubesoda.imagePullSecrets" $root }}
imagePullSecrets: {{- . | nindent 2 }}
{{- end }}
{{- $prio := .c.priorityClassName | default $root.Values.priorityClassName }}
{{- if $prio }}
priorityClassName: {{ $prio }}
{{- end }}
{{- with .c.nodeSelector }}
nodeSelector: {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .c.tolerations }}
tolerations: {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .c.affinity }}
affinity: {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .c.topologySpreadConstraints }}
topologySpreadConstraints:
{{- range . }}
{{- $tsc := deepCopy . }}
{{- if not (hasKey $tsc "labelSelector") }}
{{- $_ := set $tsc "labelSelector" (dict "matchLabels" (dict "app.kubernetes.io/instance" $root.Release.Name "app.kubernetes.io/component" $.component)) }}
{{- if not (hasKey $tsc "matchLabelKeys") }}{{ $_ := set $tsc "matchLabelKeys" (list "pod-template-hash") }}{{ end }}
{{- end }}
- {{- toYaml $tsc | nindent 2 }}
{{- end }}
{{- end }}
{{- end -}}
{{- define "kubesoda.certManager" -}}{{ and .Values.extender.tls.enabled (not .Values.extender.tls.secretName) .Values.extender.tls.certManager.enabled }}{{- end -}}
{{- define "kubesoda.schedulerTLSSecret" -}}{{ printf "%s-scheduler-tls" (include "kubesoda.name" .) }}{{- end -}}
{{- /* "true" when a SchedulingPolicy "default" exists that this release does not own */}}
{{- define "kubesoda.foreignPolicy" -}}
{{- $existing := lookup "kubesoda.io/v1alpha1" "SchedulingPolicy" "" "default" }}
{{- if $existing }}
{{- $ann := $existing.metadata.annotations | default dict }}
{{- if not (and (eq (get $ann "meta.helm.sh/release-name") .Release.Name) (eq (get $ann "meta.helm.sh/release-namespace") .Release.Namespace)) }}true{{ end }}
{{- end }}
{{- end -}}
