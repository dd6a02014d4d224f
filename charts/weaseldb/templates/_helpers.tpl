{{- define "weaseldb.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "weaseldb.operatorName" -}}
{{- printf "%s-operator" (include "weaseldb.fullname" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "weaseldb.labels" -}}
app.kubernetes.io/name: weaseldb-operator
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "weaseldb.selectorLabels" -}}
app.kubernetes.io/name: weaseldb-operator
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "weaseldb.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "weaseldb.operatorName" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "weaseldb.watchNamespace" -}}
{{- default .Release.Namespace .Values.operator.watchNamespace -}}
{{- end -}}
