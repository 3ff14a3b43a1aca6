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
