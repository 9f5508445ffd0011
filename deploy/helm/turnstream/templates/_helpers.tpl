{{- define "turnstream.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "turnstream.labels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{/* selector labels of one component: (dict "root" $ "component" "gateway") */}}
{{- define "turnstream.selector" -}}
app.kubernetes.io/name: {{ .root.Chart.Name }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{/* the broker's URL when no Secret gives it: broker.url, else the bundled Valkey */}}
{{- define "turnstream.brokerUrl" -}}
{{- if .Values.broker.url -}}
{{- .Values.broker.url -}}
{{- else if .Values.valkey.enabled -}}
{{- printf "redis://%s-valkey:6379/0" (include "turnstream.fullname" .) -}}
{{- else -}}
{{- fail "set broker.url, broker.existingSecret or valkey.enabled" -}}
{{- end -}}
{{- end -}}

{{- define "turnstream.bundledValkey" -}}
{{- if and .Values.valkey.enabled (not .Values.broker.url) (not .Values.broker.existingSecret) -}}true{{- end -}}
{{- end -}}

{{/* environment of every process: the broker, the model, the common TURNSTREAM_* keys */}}
{{- define "turnstream.env" -}}
{{- if hasPrefix "redis+cluster" .Values.broker.url }}
{{- if not .Values.broker.queueUrl }}
{{- fail "broker.url is a cluster: set broker.queueUrl to a plain Redis/Valkey for the tool queues" }}
{{- end }}
{{- end }}
{{- if .Values.broker.existingSecret }}
- name: TURNSTREAM_REDIS_URL
  valueFrom:
    secretKeyRef: {name: {{ .Values.broker.existingSecret | quote }}, key: url}
- name: TURNSTREAM_QUEUE_URL
  valueFrom:
    secretKeyRef: {name: {{ .Values.broker.existingSecret | quote }}, key: queueUrl, optional: true}
{{- else }}
- name: TURNSTREAM_REDIS_URL
  value: {{ include "turnstream.brokerUrl" . | quote }}
{{- if .Values.broker.queueUrl }}
- name: TURNSTREAM_QUEUE_URL
  value: {{ .Values.broker.queueUrl | quote }}
{{- end }}
{{- end }}
{{- if .Values.model.name }}
- name: TURNSTREAM_MODEL
  value: {{ .Values.model.name | quote }}
{{- end }}
{{- if .Values.model.servedName }}
- name: TURNSTREAM_SERVED_MODEL_NAME
  value: {{ .Values.model.servedName | quote }}
{{- end }}
- name: HF_HOME
  value: /hf-cache
{{- if .Values.model.hfTokenSecret }}
- name: HF_TOKEN
  valueFrom:
    secretKeyRef: {name: {{ .Values.model.hfTokenSecret | quote }}, key: token}
{{- end }}
{{- range $k, $v := .Values.env }}
- name: {{ $k }}
  value: {{ $v | quote }}
{{- end }}
{{- end -}}

{{/* the model volumes (HF cache, model directories) and their mounts */}}
{{- define "turnstream.modelVolumes" -}}
- name: hf-cache
{{- if .Values.model.hfCacheClaim }}
  persistentVolumeClaim: {claimName: {{ .Values.model.hfCacheClaim | quote }}}
{{- else }}
  emptyDir: {}
{{- end }}
{{- if .Values.model.modelsClaim }}
- name: models
  persistentVolumeClaim: {claimName: {{ .Values.model.modelsClaim | quote }}, readOnly: true}
{{- end }}
{{- end -}}

{{- define "turnstream.modelMounts" -}}
- name: hf-cache
  mountPath: /hf-cache
{{- if .Values.model.modelsClaim }}
- name: models
  mountPath: /models
  readOnly: true
{{- end }}
{{- end -}}

{{/* a worker's liveness: its heartbeat in the broker (turnstream healthcheck, as the image's HEALTHCHECK) */}}
{{- define "turnstream.workerProbe" -}}
livenessProbe:
  exec:
    command: ["turnstream", "healthcheck"]
  initialDelaySeconds: 30
  periodSeconds: 15
  timeoutSeconds: 10
  failureThreshold: 4
{{- end -}}
