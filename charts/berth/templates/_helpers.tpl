{{/* Chart name. */}}
{{- define "berth.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Full name: release-chart, or the release name when it contains the chart name. */}}
{{- define "berth.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "berth.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "berth.selectorLabels" -}}
app.kubernetes.io/name: {{ include "berth.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "berth.labels" -}}
helm.sh/chart: {{ include "berth.chart" . }}
{{ include "berth.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/component: scheduler
app.kubernetes.io/part-of: berth
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{- define "berth.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "berth.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "berth.leaseName" -}}
{{- default (include "berth.fullname" .) .Values.leaderElection.resourceName }}
{{- end }}

{{- define "berth.leaseNamespace" -}}
{{- default .Release.Namespace .Values.leaderElection.resourceNamespace }}
{{- end }}

{{/* Replicas: one in shadow mode (a second shadow would only repeat the verdicts). */}}
{{- define "berth.replicas" -}}
{{- if .Values.shadow.enabled }}1{{ else }}{{ .Values.replicas }}{{ end }}
{{- end }}

{{/* Leader election: never in shadow mode (a shadow takes no Lease). */}}
{{- define "berth.leaderElect" -}}
{{- and .Values.leaderElection.enabled (not .Values.shadow.enabled) }}
{{- end }}

{{- define "berth.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}

{{/* The PromQL selector of berth's series. */}}
{{- define "berth.promSelector" -}}
{{- default (printf "job=\"%s-metrics\"" (include "berth.fullname" .)) .Values.prometheusRule.selector }}
{{- end }}

{{/* The KubeSchedulerConfiguration. */}}
{{- define "berth.config" -}}
apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
leaderElection:
  leaderElect: {{ include "berth.leaderElect" . }}
  resourceLock: leases
  resourceName: {{ include "berth.leaseName" . }}
  resourceNamespace: {{ include "berth.leaseNamespace" . }}
  leaseDuration: {{ .Values.leaderElection.leaseDuration }}
  renewDeadline: {{ .Values.leaderElection.renewDeadline }}
  retryPeriod: {{ .Values.leaderElection.retryPeriod }}
clientConnection:
  qps: {{ .Values.clientConnection.qps }}
  burst: {{ .Values.clientConnection.burst }}
{{- with .Values.extraConfig }}
{{ toYaml . }}
{{- end }}
profiles:
{{ toYaml (ternary .Values.shadow.profiles .Values.profiles .Values.shadow.enabled) }}
{{- end }}
