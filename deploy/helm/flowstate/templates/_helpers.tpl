{{/* The release's name for every object, at most 63 characters. */}}
{{- define "flowstate.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "flowstate.selectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "flowstate.labels" -}}
{{ include "flowstate.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "flowstate.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "flowstate.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/*
The number of workers, after the backend's rule: kv memory holds the state
in one worker's memory, and a second worker on the same prefix refuses to
serve beside the first, so more than one is refused here rather than left
crash-looping; kv jetstream defaults to three.
*/}}
{{- define "flowstate.replicas" -}}
{{- $kv := .Values.worker.kv -}}
{{- if not (has $kv (list "memory" "jetstream")) -}}
{{- fail (printf "worker.kv %q: want memory or jetstream" $kv) -}}
{{- end -}}
{{- if eq $kv "memory" -}}
{{- $n := .Values.replicas | default 1 | int -}}
{{- if gt $n 1 -}}
{{- fail (printf "replicas %d with worker.kv memory: a memory-backed worker keeps the only copy of the state and a second one on the same prefix refuses to serve; run one replica, or set worker.kv jetstream to share the state among several" $n) -}}
{{- end -}}
{{- $n -}}
{{- else -}}
{{- .Values.replicas | default 3 | int -}}
{{- end -}}
{{- end -}}

{{/* The Secret with the NATS credentials, required when a key is set. */}}
{{- define "flowstate.authSecret" -}}
{{- $a := .Values.nats.auth -}}
{{- if and (or $a.credsKey $a.nkeyKey $a.passwordKey $a.tokenKey) (not $a.secretName) -}}
{{- fail "nats.auth: a key is set but nats.auth.secretName is empty; credentials come from a Secret only" -}}
{{- end -}}
{{- $a.secretName -}}
{{- end -}}
