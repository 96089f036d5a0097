{{/*
Checks that need more than one value, so values.schema.json cannot make them: each fails
the render with a message naming the values to change.
*/}}
{{- define "hookstream.validate" -}}
{{- $v := .Values }}
{{- $kafka := $v.config.kafka }}
{{- $partitions := dig "topic_settings" "partitions" 6 $kafka | int }}
{{- $retryPartitions := dig "retry" "partitions" 6 $v.config | int }}
{{- $a := $v.dispatcher.autoscaling }}

{{- /* Dispatchers beyond the events topic's partitions get no work. */}}
{{- if $a.enabled }}
{{- if gt (int $a.maxReplicas) $partitions }}
{{- fail (printf "dispatcher.autoscaling.maxReplicas (%d) exceeds config.kafka.topic_settings.partitions (%d): a dispatcher beyond the events topic's partition count gets no work" (int $a.maxReplicas) $partitions) }}
{{- end }}
{{- if gt (int $a.minReplicas) (int $a.maxReplicas) }}
{{- fail (printf "dispatcher.autoscaling.minReplicas (%d) exceeds maxReplicas (%d)" (int $a.minReplicas) (int $a.maxReplicas)) }}
{{- end }}
{{- if and (not $a.keda.enabled) (lt (int $a.minReplicas) 1) }}
{{- fail "dispatcher.autoscaling.minReplicas must be at least 1 without KEDA (an HPA cannot scale to zero)" }}
{{- end }}
{{- if and $a.keda.enabled $a.keda.fallback }}
{{- if gt (int $a.keda.fallback.replicas) (int $a.maxReplicas) }}
{{- fail (printf "dispatcher.autoscaling.keda.fallback.replicas (%d) exceeds maxReplicas (%d)" (int $a.keda.fallback.replicas) (int $a.maxReplicas)) }}
{{- end }}
{{- end }}
{{- else if gt (int $v.dispatcher.replicaCount) $partitions }}
{{- fail (printf "dispatcher.replicaCount (%d) exceeds config.kafka.topic_settings.partitions (%d)" (int $v.dispatcher.replicaCount) $partitions) }}
{{- end }}
{{- if and $v.dispatcherRetry.enabled (gt (int $v.dispatcherRetry.replicaCount) $retryPartitions) }}
{{- fail (printf "dispatcherRetry.replicaCount (%d) exceeds config.retry.partitions (%d)" (int $v.dispatcherRetry.replicaCount) $retryPartitions) }}
{{- end }}

{{- /* Every role runs in exactly one Deployment. */}}
{{- $roles := concat $v.dispatcher.roles (ternary $v.dispatcherRetry.roles (list) $v.dispatcherRetry.enabled) }}
{{- range list "events" "retry" "dlq_sink" "attempt_sink" }}
{{- $n := 0 }}
{{- $role := . }}
{{- range $roles }}{{ if eq . $role }}{{ $n = add1 $n }}{{ end }}{{ end }}
{{- if ne (int $n) 1 }}
{{- fail (printf "the dispatcher role %q runs in %d Deployments (dispatcher.roles, dispatcherRetry.roles): it must run in exactly one" $role (int $n)) }}
{{- end }}
{{- end }}
{{- if and $a.enabled (not (has "events" $v.dispatcher.roles)) }}
{{- fail "dispatcher.roles must include \"events\" when autoscaling is on: only the events role is scaled (on the events group's lag)" }}
{{- end }}

{{- /* Secrets that must come from somewhere. */}}
{{- if not (or $v.database.url $v.database.existingSecret) }}
{{- fail "database.url or database.existingSecret is required" }}
{{- end }}
{{- if not (or $v.sealingKeys.keys $v.sealingKeys.existingSecret $v.sealingKeys.generate) }}
{{- fail "sealingKeys.keys or sealingKeys.existingSecret is required (or sealingKeys.generate): the dispatcher refuses to start without a key" }}
{{- end }}
{{- $protocol := include "hookstream.kafka.protocol" . }}
{{- if include "hookstream.kafka.usesSasl" . }}
{{- $mechanism := include "hookstream.kafka.mechanism" . }}
{{- if not $mechanism }}
{{- fail (printf "config.kafka.security.sasl_mechanism is required with protocol %s" $protocol) }}
{{- end }}
{{- if eq $mechanism "OAUTHBEARER" }}
{{- if not (and (dig "kafka" "security" "oauth_token_endpoint" "" $v.config) (dig "kafka" "security" "oauth_client_id" "" $v.config)) }}
{{- fail "OAUTHBEARER needs config.kafka.security.oauth_token_endpoint and oauth_client_id" }}
{{- end }}
{{- if not (or $v.kafkaAuth.oauthClientSecret $v.kafkaAuth.existingSecret) }}
{{- fail "OAUTHBEARER needs kafkaAuth.oauthClientSecret or kafkaAuth.existingSecret" }}
{{- end }}
{{- else }}
{{- if not $v.kafkaAuth.saslUsername }}
{{- fail (printf "kafkaAuth.saslUsername is required with %s" $mechanism) }}
{{- end }}
{{- if not (or $v.kafkaAuth.saslPassword $v.kafkaAuth.existingSecret) }}
{{- fail (printf "kafkaAuth.saslPassword or kafkaAuth.existingSecret is required with %s" $mechanism) }}
{{- end }}
{{- end }}
{{- else }}
{{- if or $v.kafkaAuth.saslUsername $v.kafkaAuth.saslPassword (dig "kafka" "security" "sasl_mechanism" "" $v.config) }}
{{- fail (printf "SASL settings are set but config.kafka.security.protocol is %s (use sasl_ssl or sasl_plaintext)" $protocol) }}
{{- end }}
{{- end }}
{{- if and (not (include "hookstream.kafka.usesTls" .)) (or (include "hookstream.kafka.hasCa" .) $v.kafkaAuth.clientCertSecret) }}
{{- fail (printf "kafkaAuth.ca / kafkaAuth.clientCertSecret are set but config.kafka.security.protocol is %s (use ssl or sasl_ssl)" $protocol) }}
{{- end }}
{{- end }}

{{/* Rolls the pods when what they read changes: the config files and the chart's secrets. */}}
{{- define "hookstream.configChecksum" -}}
{{- list (include "hookstream.config.relay" .) (include "hookstream.config.dispatcher" .) (include "hookstream.secretData" .) | toJson | sha256sum }}
{{- end }}
