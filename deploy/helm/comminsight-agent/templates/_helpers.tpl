{{/* The chart's name: the app.kubernetes.io/name of every object. */}}
{{- define "comminsight-agent.name" -}}
{{- .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Objects' name: the release name, or <release>-<chart> unless the release name has the chart's. */}}
{{- define "comminsight-agent.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{/* What selects the Agent's pods (Service, ServiceMonitor, NetworkPolicy, DaemonSet). */}}
{{- define "comminsight-agent.selectorLabels" -}}
app.kubernetes.io/name: {{ include "comminsight-agent.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "comminsight-agent.labels" -}}
{{ include "comminsight-agent.selectorLabels" . }}
app.kubernetes.io/part-of: comminsight
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}
