{{/*
Pieces of every pod: volumes and mounts for the config file and the mounted secrets, the
database URL variable. Each volume has its own directory under /etc/hookstream (none is
mounted inside another: the kubelet rewrites a ConfigMap volume's directory on updates). Call with (dict "root" $ "hook" bool "kafka" bool "db" bool
"sealing" bool "configMap" name): which secrets this pod needs.
*/}}

{{- define "hookstream.pod.volumes" -}}
{{- $root := .root }}
{{- $v := $root.Values }}
- name: config
  configMap:
    name: {{ .configMap }}
- name: tmp
  emptyDir:
    sizeLimit: 64Mi
{{- if and .kafka (include "hookstream.kafka.usesTls" $root) (include "hookstream.kafka.hasCa" $root) }}
{{- $ref := include "hookstream.kafkaCaRef" . | fromYaml }}
- name: kafka-ca
  secret:
    secretName: {{ $ref.name }}
    defaultMode: 0440
    items:
      - key: {{ $ref.key }}
        path: ca.crt
{{- end }}
{{- if and .kafka (include "hookstream.kafka.usesTls" $root) $v.kafkaAuth.clientCertSecret }}
- name: kafka-client
  secret:
    secretName: {{ $v.kafkaAuth.clientCertSecret }}
    defaultMode: 0440
    items:
      - {key: tls.crt, path: tls.crt}
      - {key: tls.key, path: tls.key}
{{- end }}
{{- if and .kafka (include "hookstream.kafka.usesSasl" $root) }}
{{- if eq (include "hookstream.kafka.mechanism" $root) "OAUTHBEARER" }}
{{- $ref := include "hookstream.oauthSecretRef" . | fromYaml }}
- name: kafka-oauth
  secret:
    secretName: {{ $ref.name }}
    defaultMode: 0440
    items:
      - key: {{ $ref.key }}
        path: client-secret
{{- else }}
{{- $ref := include "hookstream.saslPasswordRef" . | fromYaml }}
- name: kafka-sasl
  secret:
    secretName: {{ $ref.name }}
    defaultMode: 0440
    items:
      - key: {{ $ref.key }}
        path: password
{{- end }}
{{- end }}
{{- if and .db $v.database.tls.caSecret }}
- name: db-ca
  secret:
    secretName: {{ $v.database.tls.caSecret }}
    defaultMode: 0440
    items:
      - key: {{ $v.database.tls.caSecretKey }}
        path: ca.crt
{{- end }}
{{- if and .db $v.database.tls.clientCertSecret }}
- name: db-client
  secret:
    secretName: {{ $v.database.tls.clientCertSecret }}
    defaultMode: 0440
    items:
      - {key: tls.crt, path: tls.crt}
      - {key: tls.key, path: tls.key}
{{- end }}
{{- if .sealing }}
{{- $ref := include "hookstream.sealingKeysRef" $root | fromYaml }}
- name: sealing-keys
  secret:
    secretName: {{ $ref.name }}
    defaultMode: 0440
    items:
      - key: {{ $ref.key }}
        path: keys
{{- end }}
{{- end }}

{{- define "hookstream.pod.volumeMounts" -}}
{{- $root := .root }}
{{- $v := $root.Values }}
- name: config
  mountPath: /etc/hookstream/config
  readOnly: true
- name: tmp
  mountPath: /tmp
{{- if and .kafka (include "hookstream.kafka.usesTls" $root) (include "hookstream.kafka.hasCa" $root) }}
- name: kafka-ca
  mountPath: /etc/hookstream/kafka-ca
  readOnly: true
{{- end }}
{{- if and .kafka (include "hookstream.kafka.usesTls" $root) $v.kafkaAuth.clientCertSecret }}
- name: kafka-client
  mountPath: /etc/hookstream/kafka-client
  readOnly: true
{{- end }}
{{- if and .kafka (include "hookstream.kafka.usesSasl" $root) }}
{{- if eq (include "hookstream.kafka.mechanism" $root) "OAUTHBEARER" }}
- name: kafka-oauth
  mountPath: /etc/hookstream/kafka-oauth
  readOnly: true
{{- else }}
- name: kafka-sasl
  mountPath: /etc/hookstream/kafka-sasl
  readOnly: true
{{- end }}
{{- end }}
{{- if and .db $v.database.tls.caSecret }}
- name: db-ca
  mountPath: /etc/hookstream/db-ca
  readOnly: true
{{- end }}
{{- if and .db $v.database.tls.clientCertSecret }}
- name: db-client
  mountPath: /etc/hookstream/db-client
  readOnly: true
{{- end }}
{{- if .sealing }}
- name: sealing-keys
  mountPath: /etc/hookstream/sealing-keys
  readOnly: true
{{- end }}
{{- end }}

{{/* HOOKSTREAM_DATABASE__URL from its Secret. */}}
{{- define "hookstream.pod.dbEnv" -}}
{{- $ref := include "hookstream.dbUrlRef" . | fromYaml }}
- name: HOOKSTREAM_DATABASE__URL
  valueFrom:
    secretKeyRef:
      name: {{ $ref.name }}
      key: {{ $ref.key }}
{{- end }}

{{/* Spread over zones and nodes unless the component sets its own constraints. */}}
{{- define "hookstream.pod.topologySpread" -}}
{{- if .values.topologySpreadConstraints }}
{{- toYaml .values.topologySpreadConstraints }}
{{- else }}
{{- range list "topology.kubernetes.io/zone" "kubernetes.io/hostname" }}
- maxSkew: 1
  topologyKey: {{ . }}
  whenUnsatisfiable: ScheduleAnyway
  labelSelector:
    matchLabels:
      {{- include "hookstream.componentSelectorLabels" $ | nindent 6 }}
  matchLabelKeys:
    - pod-template-hash
{{- end }}
{{- end }}
{{- end }}
