{{/*
The services' TOML files, assembled from `config` plus the keys the chart manages.

Helm reads every number in values as a float64, and `toToml` would write 6 as `6.0`, which
the services refuse for integer keys: this small renderer writes integral numbers as
integers (float keys such as retry.jitter take integers too), strings as JSON strings
(valid TOML basic strings), and leaves out keys set to null.
*/}}

{{- define "hookstream.toml.key" -}}
{{- if regexMatch "^[A-Za-z0-9_-]+$" . }}{{ . }}{{ else }}{{ toJson . }}{{ end }}
{{- end }}

{{- define "hookstream.toml.value" -}}
{{- $v := . }}
{{- if kindIs "bool" $v }}{{ $v }}
{{- else if kindIs "string" $v }}{{ toJson $v }}
{{- else if kindIs "float64" $v }}{{ if eq (floor $v) $v }}{{ int64 $v }}{{ else }}{{ $v }}{{ end }}
{{- else if or (kindIs "int" $v) (kindIs "int64" $v) (kindIs "int32" $v) (kindIs "uint64" $v) }}{{ $v }}
{{- else if kindIs "slice" $v }}[{{ range $i, $e := $v }}{{ if $i }}, {{ end }}{{ include "hookstream.toml.value" $e }}{{ end }}]
{{- else }}{{ fail (printf "hookstream: cannot write a %s as TOML" (kindOf $v)) }}
{{- end }}
{{- end }}

{{/* (dict "path" "kafka.security" "table" $map): one table, then its sub-tables. */}}
{{- define "hookstream.toml.table" -}}
[{{ .path }}]
{{- range $k, $v := .table }}
{{- if and (not (kindIs "map" $v)) (not (kindIs "invalid" $v)) }}
{{ include "hookstream.toml.key" $k }} = {{ include "hookstream.toml.value" $v }}
{{- end }}
{{- end }}
{{- $path := .path }}
{{- range $k, $v := .table }}
{{- if kindIs "map" $v }}

{{ include "hookstream.toml.table" (dict "path" (printf "%s.%s" $path (include "hookstream.toml.key" $k)) "table" $v) }}
{{- end }}
{{- end }}
{{- end }}

{{/* (dict "sections" (list "database" …) "config" $cfg): a whole file. */}}
{{- define "hookstream.toml.file" -}}
{{- $cfg := .config }}
{{- range .sections }}

{{ include "hookstream.toml.table" (dict "path" . "table" (get $cfg . | default dict)) }}
{{- end }}
{{- end }}

{{/* Where the chart mounts things. */}}
{{- define "hookstream.paths" -}}
config: /etc/hookstream/config
kafkaCa: /etc/hookstream/kafka-ca/ca.crt
kafkaCert: /etc/hookstream/kafka-client/tls.crt
kafkaKey: /etc/hookstream/kafka-client/tls.key
saslPassword: /etc/hookstream/kafka-sasl/password
oauthSecret: /etc/hookstream/kafka-oauth/client-secret
dbCa: /etc/hookstream/db-ca/ca.crt
dbCert: /etc/hookstream/db-client/tls.crt
dbKey: /etc/hookstream/db-client/tls.key
sealingKeys: /etc/hookstream/sealing-keys/keys
{{- end }}

{{/* The whole configuration with the chart-managed keys set (a dict, as YAML). */}}
{{- define "hookstream.config.full" -}}
{{- $root := . }}
{{- $v := .Values }}
{{- $p := include "hookstream.paths" . | fromYaml }}
{{- $cfg := deepCopy ($v.config | default dict) }}
{{- range list "database" "kafka" "telemetry" "relay" "delivery" "dispatcher" "retry" "dlq" "attempts" "api" }}
{{- if not (kindIs "map" (get $cfg .)) }}{{ $_ := set $cfg . dict }}{{ end }}
{{- end }}
{{- /* Helm reads values as YAML 1.1, where an unquoted `log: off` is false. */}}
{{- if and (hasKey $cfg.attempts "log") (kindIs "bool" $cfg.attempts.log) }}{{ $_ := set $cfg.attempts "log" "off" }}{{ end }}
{{- $db := $cfg.database }}
{{- if not (hasKey $db "migrate_on_start") }}
{{- $_ := set $db "migrate_on_start" (not $v.migrations.enabled) }}
{{- end }}
{{- if $v.database.tls.caSecret }}{{ $_ := set $db "ssl_root_cert" $p.dbCa }}{{ end }}
{{- if $v.database.tls.clientCertSecret }}
{{- $_ := set $db "ssl_client_cert" $p.dbCert }}
{{- $_ := set $db "ssl_client_key" $p.dbKey }}
{{- end }}
{{- $kafka := $cfg.kafka }}
{{- if not (kindIs "map" $kafka.security) }}{{ $_ := set $kafka "security" dict }}{{ end }}
{{- $sec := $kafka.security }}
{{- if include "hookstream.kafka.usesTls" . }}
{{- if include "hookstream.kafka.hasCa" . }}{{ $_ := set $sec "ca_file" $p.kafkaCa }}{{ end }}
{{- if $v.kafkaAuth.clientCertSecret }}
{{- $_ := set $sec "cert_file" $p.kafkaCert }}
{{- $_ := set $sec "key_file" $p.kafkaKey }}
{{- end }}
{{- end }}
{{- if include "hookstream.kafka.usesSasl" . }}
{{- if eq (include "hookstream.kafka.mechanism" .) "OAUTHBEARER" }}
{{- $_ := set $sec "oauth_client_secret_file" $p.oauthSecret }}
{{- else }}
{{- $_ := set $sec "sasl_username" $v.kafkaAuth.saslUsername }}
{{- $_ := set $sec "sasl_password_file" $p.saslPassword }}
{{- end }}
{{- end }}
{{- $_ := set $cfg.telemetry "listen" (printf "%s:%d" $v.metrics.listenHost (int $v.metrics.port)) }}
{{- $_ := set $cfg "secrets" (dict "key_file" $p.sealingKeys) }}
{{- $_ := set $cfg.api "listen" (printf "0.0.0.0:%d" (int $v.api.port)) }}
{{- toYaml $cfg }}
{{- end }}

{{- define "hookstream.config.relay" -}}
# outbox-relay configuration, rendered by the Hookstream chart (see docs/configuration.md).
# HOOKSTREAM_DATABASE__URL comes from a Secret.
{{- include "hookstream.toml.file" (dict "config" (include "hookstream.config.full" . | fromYaml) "sections" (list "database" "kafka" "telemetry" "secrets" "relay")) }}
{{- end }}

{{- define "hookstream.config.dispatcher" -}}
# dispatcher configuration, rendered by the Hookstream chart (see docs/configuration.md).
# HOOKSTREAM_DATABASE__URL comes from a Secret; each Deployment sets its roles with
# HOOKSTREAM_DISPATCHER__ROLES.
{{- include "hookstream.toml.file" (dict "config" (include "hookstream.config.full" . | fromYaml) "sections" (list "database" "kafka" "telemetry" "delivery" "dispatcher" "retry" "dlq" "attempts" "secrets")) }}
{{- end }}

{{- define "hookstream.config.api" -}}
# hookstream-api configuration, rendered by the Hookstream chart (see docs/configuration.md,
# docs/api.md). HOOKSTREAM_DATABASE__URL comes from a Secret.
{{- include "hookstream.toml.file" (dict "config" (include "hookstream.config.full" . | fromYaml) "sections" (list "database" "kafka" "telemetry" "delivery" "retry" "secrets" "api")) }}
{{- end }}

{{/* The migration job needs the database only. */}}
{{- define "hookstream.config.migrate" -}}
# `hookstream migrate` configuration, rendered by the Hookstream chart.
{{- include "hookstream.toml.file" (dict "config" (include "hookstream.config.full" . | fromYaml) "sections" (list "database")) }}
{{- end }}

{{/* The topics job needs Kafka and the retry tiers (the same values the dispatcher reads). */}}
{{- define "hookstream.config.topics" -}}
# `hookstream topics create` configuration, rendered by the Hookstream chart.
{{- include "hookstream.toml.file" (dict "config" (include "hookstream.config.full" . | fromYaml) "sections" (list "kafka" "retry")) }}
{{- end }}
