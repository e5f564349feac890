{{- define "sluice.fullname" -}}
{{- printf "%s" .Release.Name | trunc 40 | trimSuffix "-" -}}
{{- end -}}

{{- define "sluice.labels" -}}
app.kubernetes.io/part-of: sluice
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "sluice.image" -}}
{{- $root := index . 0 -}}
{{- $name := index . 1 -}}
{{- printf "%s/%s:%s" $root.Values.image.registry $name $root.Values.image.tag -}}
{{- end -}}

{{/* The Secret and keys the services read Redis' URL from. */}}
{{- define "sluice.redisSecret" -}}
{{- if .Values.redis.enabled -}}{{ include "sluice.fullname" . }}-redis-url{{- else -}}{{ required "externalRedis.existingSecret is required when redis.enabled is false" .Values.externalRedis.existingSecret }}{{- end -}}
{{- end -}}

{{- define "sluice.redisPasswordSecret" -}}
{{- if .Values.redis.enabled -}}{{ .Values.redis.existingSecret | default (printf "%s-redis" (include "sluice.fullname" .)) }}{{- else -}}{{ .Values.externalRedis.existingSecret }}{{- end -}}
{{- end -}}

{{- define "sluice.redisAddress" -}}
{{- if .Values.redis.enabled -}}{{ include "sluice.fullname" . }}-redis:6379{{- else -}}{{ required "externalRedis.address is required when redis.enabled is false" .Values.externalRedis.address }}{{- end -}}
{{- end -}}

{{/* Environment every Sluice container gets. */}}
{{- define "sluice.commonEnv" -}}
- name: SLUICE_REDIS_URL
  valueFrom:
    secretKeyRef: {name: {{ include "sluice.redisSecret" . }}, key: url}
- name: SLUICE_LOG_FORMAT
  value: json
{{- if not .Values.auth.enabled }}
- name: SLUICE_DISABLE_TOKEN_AUTHORIZATION
  value: "true"
{{- end }}
{{- range $name, $value := .Values.otel }}
- name: {{ $name }}
  value: {{ $value | quote }}
{{- end }}
{{- end -}}

{{/* TLS environment of the gateway and the manager (the Secret is mounted at /etc/sluice/tls). */}}
{{- define "sluice.tlsEnv" -}}
{{- if .Values.tls.enabled }}
- name: SLUICE_CERTIFICATE_FILE
  value: /etc/sluice/tls/tls.crt
- name: SLUICE_PRIVATE_KEY_FILE
  value: /etc/sluice/tls/tls.key
- name: SLUICE_ENABLE_GRPC_SSL
  value: "true"
{{- end }}
{{- end -}}

{{- define "sluice.tlsVolume" -}}
{{- if .Values.tls.enabled }}
- name: tls
  secret:
    secretName: {{ required "tls.secretName is required when tls.enabled is true" .Values.tls.secretName }}
{{- end }}
{{- end -}}

{{- define "sluice.tlsMount" -}}
{{- if .Values.tls.enabled }}
- {name: tls, mountPath: /etc/sluice/tls, readOnly: true}
{{- end }}
{{- end -}}

{{- define "sluice.scheme" -}}
{{- if .Values.tls.enabled }}https{{ else }}http{{ end -}}
{{- end -}}

{{- define "sluice.containerSecurity" -}}
readOnlyRootFilesystem: true
allowPrivilegeEscalation: false
capabilities: {drop: [ALL]}
{{- end -}}

{{/* A model version's Deployment name: sluice-worker-<model>-<version with . as ->. */}}
{{- define "sluice.workerName" -}}
{{- $root := index . 0 -}}
{{- $model := index . 1 -}}
{{- printf "%s-worker-%s-%s" (include "sluice.fullname" $root) ($model.name | lower) (toString $model.version | replace "." "-" | replace "_" "-" | lower) | trunc 63 | trimSuffix "-" -}}
{{- end -}}
