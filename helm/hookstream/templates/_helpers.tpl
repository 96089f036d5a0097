{{/* Names, labels and the image. */}}

{{- define "hookstream.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "hookstream.fullname" -}}
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

{{- define "hookstream.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Labels every object carries. */}}
{{- define "hookstream.labels" -}}
helm.sh/chart: {{ include "hookstream.chart" . }}
{{ include "hookstream.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: hookstream
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/* What every pod of the release matches (the NetworkPolicy selects on these). */}}
{{- define "hookstream.selectorLabels" -}}
app.kubernetes.io/name: {{ include "hookstream.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/* Labels of one component; call with (dict "root" $ "component" "dispatcher"). */}}
{{- define "hookstream.componentLabels" -}}
{{ include "hookstream.labels" .root }}
app.kubernetes.io/component: {{ .component }}
{{- end }}

{{- define "hookstream.componentSelectorLabels" -}}
{{ include "hookstream.selectorLabels" .root }}
app.kubernetes.io/component: {{ .component }}
{{- end }}

{{- define "hookstream.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "hookstream.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* The jobs run before the release's own ServiceAccount exists: a hook one of their own. */}}
{{- define "hookstream.hookServiceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- printf "%s-hooks" (include "hookstream.fullname" .) }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "hookstream.image" -}}
{{- $tag := default .Chart.AppVersion .Values.image.tag }}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository $tag }}
{{- end }}
{{- end }}

{{/*
The components: one Deployment (and Service, PDB) each, rendered by the same templates.
`values` names the component's values section, `binary` its command, `config` its file.
A future API is one more entry here.
*/}}
{{- define "hookstream.components" -}}
outbox-relay:
  values: outboxRelay
  binary: outbox-relay
  config: relay.toml
  enabled: true
dispatcher:
  values: dispatcher
  binary: dispatcher
  config: dispatcher.toml
  enabled: true
  roles: true
dispatcher-retry:
  values: dispatcherRetry
  binary: dispatcher
  config: dispatcher.toml
  enabled: {{ .Values.dispatcherRetry.enabled }}
  roles: true
api:
  values: api
  binary: hookstream-api
  config: api.toml
  enabled: {{ .Values.api.enabled }}
  http: true
{{- end }}

{{/* Drain deadline of a component's process, in seconds (what the supervisor waits). */}}
{{- define "hookstream.drainSeconds" -}}
{{- $root := .root }}
{{- $cfg := $root.Values.config }}
{{- if eq .binary "dispatcher" }}
{{- $ms := (dig "dispatcher" "shutdown_grace_ms" 20000 $cfg) | int64 }}
{{- /* shutdown_grace_ms, then the supervisor's 10 s beyond it */}}
{{- add (div (add $ms 999) 1000) 10 }}
{{- else if eq .binary "outbox-relay" }}
{{- $ms := (dig "relay" "produce_timeout_ms" 30000 $cfg) | int64 }}
{{- /* produce_timeout_ms + 10 s of the supervisor + the producer's 5 s flush */}}
{{- add (div (add $ms 999) 1000) 15 }}
{{- else if eq .binary "hookstream-api" }}
{{- $ms := (dig "api" "shutdown_grace_ms" 10000 $cfg) | int64 }}
{{- /* requests and recoveries: shutdown_grace_ms; the supervisor allows twice that */}}
{{- add (div (add (mul $ms 2) 999) 1000) 5 }}
{{- else }}
{{- 30 }}
{{- end }}
{{- end }}

{{/* ---- Secrets: where each one comes from. ---- */}}

{{/* Name of the chart-managed Secret; the hook copy for the jobs with (dict "root" $ "hook" true). */}}
{{- define "hookstream.secretName" -}}
{{- if .hook }}{{ printf "%s-hooks" (include "hookstream.fullname" .root) }}{{ else }}{{ include "hookstream.fullname" .root }}{{ end }}
{{- end }}

{{/* The Secret data the chart renders from inline values (empty dict: no Secret). */}}
{{- define "hookstream.secretData" -}}
{{- $v := .Values }}
{{- $d := dict }}
{{- if and (not $v.database.existingSecret) $v.database.url }}
{{- $_ := set $d "database-url" $v.database.url }}
{{- end }}
{{- if not $v.kafkaAuth.existingSecret }}
{{- with $v.kafkaAuth.saslPassword }}{{ $_ := set $d "kafka-sasl-password" . }}{{ end }}
{{- with $v.kafkaAuth.oauthClientSecret }}{{ $_ := set $d "kafka-oauth-client-secret" . }}{{ end }}
{{- end }}
{{- if and (not $v.kafkaAuth.ca.existingSecret) $v.kafkaAuth.ca.pem }}
{{- $_ := set $d "kafka-ca.crt" $v.kafkaAuth.ca.pem }}
{{- end }}
{{- if and (not $v.sealingKeys.existingSecret) $v.sealingKeys.keys }}
{{- $_ := set $d "sealing-keys" (printf "%s\n" (join "\n" $v.sealingKeys.keys)) }}
{{- end }}
{{- toYaml $d }}
{{- end }}

{{/* (dict "root" $ "hook" bool) -> a SecretKeySelector-like dict {name, key} for the URL. */}}
{{- define "hookstream.dbUrlRef" -}}
{{- $v := .root.Values }}
{{- if $v.database.existingSecret }}
name: {{ $v.database.existingSecret }}
key: {{ $v.database.existingSecretKey }}
{{- else }}
name: {{ include "hookstream.secretName" . }}
key: database-url
{{- end }}
{{- end }}

{{- define "hookstream.saslPasswordRef" -}}
{{- $v := .root.Values }}
{{- if $v.kafkaAuth.existingSecret }}
name: {{ $v.kafkaAuth.existingSecret }}
key: {{ $v.kafkaAuth.saslPasswordKey }}
{{- else }}
name: {{ include "hookstream.secretName" . }}
key: kafka-sasl-password
{{- end }}
{{- end }}

{{- define "hookstream.oauthSecretRef" -}}
{{- $v := .root.Values }}
{{- if $v.kafkaAuth.existingSecret }}
name: {{ $v.kafkaAuth.existingSecret }}
key: {{ $v.kafkaAuth.oauthClientSecretKey }}
{{- else }}
name: {{ include "hookstream.secretName" . }}
key: kafka-oauth-client-secret
{{- end }}
{{- end }}

{{- define "hookstream.kafkaCaRef" -}}
{{- $v := .root.Values }}
{{- if $v.kafkaAuth.ca.existingSecret }}
name: {{ $v.kafkaAuth.ca.existingSecret }}
key: {{ $v.kafkaAuth.ca.key }}
{{- else }}
name: {{ include "hookstream.secretName" . }}
key: kafka-ca.crt
{{- end }}
{{- end }}

{{- define "hookstream.sealingKeysRef" -}}
{{- $v := .Values }}
{{- if $v.sealingKeys.existingSecret }}
name: {{ $v.sealingKeys.existingSecret }}
key: {{ $v.sealingKeys.existingSecretKey }}
{{- else if $v.sealingKeys.keys }}
name: {{ include "hookstream.fullname" . }}
key: sealing-keys
{{- else }}
name: {{ printf "%s-sealing-keys" (include "hookstream.fullname" .) }}
key: sealing-keys
{{- end }}
{{- end }}

{{/* What Kafka security needs mounted. */}}
{{- define "hookstream.kafka.protocol" -}}
{{- dig "kafka" "security" "protocol" "plaintext" .Values.config }}
{{- end }}

{{- define "hookstream.kafka.mechanism" -}}
{{- dig "kafka" "security" "sasl_mechanism" "" .Values.config }}
{{- end }}

{{- define "hookstream.kafka.usesTls" -}}
{{- if has (include "hookstream.kafka.protocol" .) (list "ssl" "sasl_ssl") }}true{{ end }}
{{- end }}

{{- define "hookstream.kafka.usesSasl" -}}
{{- if has (include "hookstream.kafka.protocol" .) (list "sasl_plaintext" "sasl_ssl") }}true{{ end }}
{{- end }}

{{- define "hookstream.kafka.hasCa" -}}
{{- if or .Values.kafkaAuth.ca.existingSecret .Values.kafkaAuth.ca.pem }}true{{ end }}
{{- end }}
