{{/* Chart name. */}}
{{- define "slurmbridge.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Full name: the release name, or "<release>-<chart>" when the release name lacks the chart name. */}}
{{- define "slurmbridge.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 40 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 40 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 40 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* Prefix of cluster-scoped objects: full name + namespace, so two installs never clash. */}}
{{- define "slurmbridge.clusterName" -}}
{{- printf "%s-%s" (include "slurmbridge.fullname" .) .Release.Namespace -}}
{{- end -}}

{{- define "slurmbridge.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
app.kubernetes.io/name: {{ include "slurmbridge.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: slurmbridge
{{- end -}}

{{/* Selector labels of one component: include "slurmbridge.selector" (list . "extender") */}}
{{- define "slurmbridge.selector" -}}
{{- $top := index . 0 -}}
app.kubernetes.io/name: {{ include "slurmbridge.name" $top }}
app.kubernetes.io/instance: {{ $top.Release.Name }}
app.kubernetes.io/component: {{ index . 1 }}
{{- end -}}

{{- define "slurmbridge.componentLabels" -}}
{{ include "slurmbridge.labels" (index . 0) }}
app.kubernetes.io/component: {{ index . 1 }}
{{- end -}}

{{- define "slurmbridge.extender.name" -}}{{ include "slurmbridge.fullname" . }}-extender{{- end -}}
{{- define "slurmbridge.webhook.name" -}}{{ include "slurmbridge.fullname" . }}-webhook{{- end -}}
{{- define "slurmbridge.scheduler.name" -}}{{ include "slurmbridge.fullname" . }}-scheduler{{- end -}}

{{- define "slurmbridge.extender.serviceAccount" -}}
{{- default (include "slurmbridge.extender.name" .) .Values.serviceAccount.extenderName -}}
{{- end -}}
{{- define "slurmbridge.webhook.serviceAccount" -}}
{{- default (include "slurmbridge.webhook.name" .) .Values.serviceAccount.webhookName -}}
{{- end -}}
{{- define "slurmbridge.scheduler.serviceAccount" -}}
{{- default (include "slurmbridge.scheduler.name" .) .Values.serviceAccount.schedulerName -}}
{{- end -}}

{{- define "slurmbridge.scheduler.lease" -}}
{{- default (include "slurmbridge.scheduler.name" .) .Values.scheduler.leaseName -}}
{{- end -}}

{{- define "slurmbridge.webhook.tlsSecret" -}}{{ include "slurmbridge.webhook.name" . }}-tls{{- end -}}
{{- define "slurmbridge.webhook.certificate" -}}{{ include "slurmbridge.webhook.name" . }}-serving{{- end -}}

{{- define "slurmbridge.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}

{{- define "slurmbridge.config.name" -}}{{ include "slurmbridge.fullname" . }}-config{{- end -}}
{{- define "slurmbridge.tenancy.name" -}}{{ include "slurmbridge.fullname" . }}-tenancy{{- end -}}
{{- define "slurmbridge.tenancyDir" -}}/etc/slurmbridge-tenancy{{- end -}}
{{- define "slurmbridge.jwt.secretName" -}}{{ required "slurm.jwt.secretName is required" .Values.slurm.jwt.secretName }}{{- end -}}

{{/* Paths inside the bridge containers. */}}
{{- define "slurmbridge.configDir" -}}/etc/slurmbridge{{- end -}}
{{- define "slurmbridge.tokenDir" -}}/var/run/secrets/slurmbridge/slurm{{- end -}}
{{- define "slurmbridge.slurmCaDir" -}}/var/run/secrets/slurmbridge/slurm-ca{{- end -}}
{{- define "slurmbridge.slurmClientDir" -}}/var/run/secrets/slurmbridge/slurm-client{{- end -}}
{{- define "slurmbridge.tlsDir" -}}/var/run/secrets/slurmbridge/tls{{- end -}}
{{- define "slurmbridge.extenderTlsDir" -}}/var/run/secrets/slurmbridge/extender-tls{{- end -}}
{{- define "slurmbridge.schedulerTlsDir" -}}/etc/kubernetes/slurmbridge-extender-client{{- end -}}
{{- define "slurmbridge.extender.tlsSecret" -}}{{ include "slurmbridge.extender.name" . }}-tls{{- end -}}
{{- define "slurmbridge.scheduler.clientSecret" -}}{{ include "slurmbridge.scheduler.name" . }}-extender-client{{- end -}}

{{/* Namespaces the webhooks never see: kube-system, the release namespace, the excluded. */}}
{{- define "slurmbridge.uncoveredNamespaces" -}}
{{- concat (list "kube-system" .Release.Namespace) (.Values.webhook.excludeNamespaces | default list) | uniq | toJson -}}
{{- end -}}

{{/*
The bridge settings file (bridge/config.py layout).  Order of precedence, lowest first:
what the values above say, then .Values.config, then what the chart must own (paths,
ports, the bridge identity the webhook trusts).
*/}}
{{- define "slurmbridge.settings" -}}
{{- $slurm := dict "url" .Values.slurm.url "user" .Values.slurm.user -}}
{{- if .Values.slurm.dataParser }}{{ $_ := set $slurm "data_parser" .Values.slurm.dataParser }}{{ end -}}
{{- $tls := .Values.slurm.tls -}}
{{- $tlsFiles := dict -}}
{{- if $tls.caSecret }}{{ $_ := set $tlsFiles "ca_file" (printf "%s/%s" (include "slurmbridge.slurmCaDir" .) $tls.caKey) }}{{ end -}}
{{- if $tls.clientSecret }}{{ $_ := set $tlsFiles "cert_file" (printf "%s/tls.crt" (include "slurmbridge.slurmClientDir" .)) }}{{ $_ := set $tlsFiles "key_file" (printf "%s/tls.key" (include "slurmbridge.slurmClientDir" .)) }}{{ end -}}
{{- if $tls.serverName }}{{ $_ := set $slurm "tls" (dict "server_name" $tls.serverName) }}{{ end -}}
{{- if and (or $tls.caSecret $tls.clientSecret $tls.serverName) (not (hasPrefix "https://" .Values.slurm.url)) -}}
{{- fail (printf "slurm.tls is set but slurm.url %s is not https://: write https://HOST:PORT" .Values.slurm.url) -}}
{{- end -}}
{{- $policy := .Values.admission.defaultPolicy -}}
{{- $default := dict "accounts" ($policy.accounts | default list) "partitions" ($policy.partitions | default list) "qos" ($policy.qos | default list) "reservations" ($policy.reservations | default list) "wckeys" ($policy.wckeys | default list) "allow_constraints" ($policy.allowConstraints | default false) "allow_exclusive" ($policy.allowExclusive | default false) "allow_topology" ($policy.allowTopology | default false) -}}
{{- if not (kindIs "invalid" $policy.maxPriority) }}{{ $_ := set $default "max_priority" (int $policy.maxPriority) }}{{ end -}}
{{- if not (kindIs "invalid" $policy.maxTimeLimitMinutes) }}{{ $_ := set $default "max_time_limit_minutes" (int $policy.maxTimeLimitMinutes) }}{{ end -}}
{{- $admission := dict "enrolled_namespaces" .Values.admission.enrolledNamespaces "default_policy" $default "policies" .Values.admission.policies -}}
{{- $classes := dict -}}
{{- range $name, $class := .Values.deviceClasses }}
{{- $one := dict "gres" ($class.gres | default "gpu") -}}
{{- if $class.type }}{{ $_ := set $one "type" $class.type }}{{ end -}}
{{- if $class.driver }}{{ $_ := set $one "driver" $class.driver }}{{ end -}}
{{- if $class.indexAttribute }}{{ $_ := set $one "index_attribute" $class.indexAttribute }}{{ end -}}
{{- $_ := set $classes $name $one -}}
{{- end -}}
{{- $settings := dict "slurm" $slurm "admission" $admission "device_classes" $classes -}}
{{- $settings = mergeOverwrite $settings (deepCopy (.Values.config | default dict)) -}}
{{- $owned := dict
      "slurm" (dict "token_file" (printf "%s/%s" (include "slurmbridge.tokenDir" .) .Values.slurm.jwt.key) "owner_key_file" (printf "%s/owner-key" (include "slurmbridge.extenderTlsDir" .)))
      "extender" (dict
        "host" "0.0.0.0"
        "port" (int .Values.extender.port)
        "health_port" (int .Values.extender.healthPort)
        "drain_seconds" (int .Values.shutdownDelaySeconds)
        "tls_cert_file" (printf "%s/tls.crt" (include "slurmbridge.extenderTlsDir" .))
        "tls_key_file" (printf "%s/tls.key" (include "slurmbridge.extenderTlsDir" .))
        "client_ca_file" (printf "%s/client-ca.crt" (include "slurmbridge.extenderTlsDir" .)))
      "controllers" (dict "lease_namespace" .Release.Namespace)
      "admission" (dict
        "tenancy_file" (printf "%s/tenancy.yaml" (include "slurmbridge.tenancyDir" .))
        "bridge_namespace" .Release.Namespace
        "bridge_service_account" (include "slurmbridge.extender.serviceAccount" .)
        "exclude_namespaces" (.Values.webhook.excludeNamespaces | default list)
        "tls_cert_file" (printf "%s/tls.crt" (include "slurmbridge.tlsDir" .))
        "tls_key_file" (printf "%s/tls.key" (include "slurmbridge.tlsDir" .))
        "host" "0.0.0.0"
        "port" (int .Values.webhook.port)
        "drain_seconds" (int .Values.shutdownDelaySeconds)) -}}
{{- if $tlsFiles }}{{ $_ := set $owned.slurm "tls" $tlsFiles }}{{ end -}}
{{- $settings = mergeOverwrite $settings $owned -}}
{{- toYaml $settings -}}
{{- end -}}

{{/* Volumes and env every bridge container shares. */}}
{{- define "slurmbridge.commonEnv" -}}
- name: SLURMBRIDGE_CONFIG_FILE
  value: {{ include "slurmbridge.configDir" . }}/settings.yaml
{{- if .Values.slurm.jwt.signingKey }}
- name: SLURMBRIDGE_SLURM__JWT_KEY_FILE
{{- else }}
- name: SLURMBRIDGE_SLURM__TOKEN_FILE
{{- end }}
  value: {{ include "slurmbridge.tokenDir" . }}/{{ .Values.slurm.jwt.key }}
{{- end -}}

{{/* What the extender reads its settings, tenancy, Slurm token and slurmrestd TLS files from
(the doctor test hook reads the same). */}}
{{- define "slurmbridge.settingsMounts" -}}
- name: config
  mountPath: {{ include "slurmbridge.configDir" . }}
  readOnly: true
- name: tenancy
  mountPath: {{ include "slurmbridge.tenancyDir" . }}
  readOnly: true
- name: slurm-jwt
  mountPath: {{ include "slurmbridge.tokenDir" . }}
  readOnly: true
{{- if .Values.slurm.tls.caSecret }}
- name: slurm-ca
  mountPath: {{ include "slurmbridge.slurmCaDir" . }}
  readOnly: true
{{- end }}
{{- if .Values.slurm.tls.clientSecret }}
- name: slurm-client
  mountPath: {{ include "slurmbridge.slurmClientDir" . }}
  readOnly: true
{{- end }}
{{- end -}}
{{- define "slurmbridge.settingsVolumes" -}}
- name: config
  configMap:
    name: {{ include "slurmbridge.config.name" . }}
- name: tenancy
  configMap:
    name: {{ include "slurmbridge.tenancy.name" . }}
# A projected Secret volume: an updated token appears in the file without a restart.
- name: slurm-jwt
  secret:
    secretName: {{ include "slurmbridge.jwt.secretName" . }}
    items:
      - key: {{ .Values.slurm.jwt.key }}
        path: {{ .Values.slurm.jwt.key }}
{{- with .Values.slurm.tls }}
{{- if .caSecret }}
- name: slurm-ca
  secret:
    secretName: {{ .caSecret }}
    items:
      - key: {{ .caKey }}
        path: {{ .caKey }}
{{- end }}
{{- if .clientSecret }}
- name: slurm-client
  secret:
    secretName: {{ .clientSecret }}
    items:
      - {key: tls.crt, path: tls.crt}
      - {key: tls.key, path: tls.key}
{{- end }}
{{- end }}
{{- end -}}

{{- define "slurmbridge.configChecksum" -}}
{{- include "slurmbridge.settings" . | sha256sum -}}
{{- end -}}

{{/* The KubeSchedulerConfiguration of the second scheduler. */}}
{{- define "slurmbridge.scheduler.config" -}}
apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
leaderElection:
  leaderElect: true
  resourceLock: leases
  resourceNamespace: {{ .Release.Namespace }}
  resourceName: {{ include "slurmbridge.scheduler.lease" . }}
# The extender must see every feasible node: Slurm, not sampling, picks the node.
percentageOfNodesToScore: 100
profiles:
  - schedulerName: {{ .Values.scheduler.schedulerName }}
# Mutual TLS: the scheduler checks the extender's certificate and presents its own.
extenders:
  - urlPrefix: https://{{ include "slurmbridge.extender.name" . }}.{{ .Release.Namespace }}.svc:{{ .Values.extender.port }}
    filterVerb: filter
    prioritizeVerb: prioritize
    bindVerb: bind
    weight: 1
    nodeCacheCapable: true
    enableHTTPS: true
    tlsConfig:
      certFile: {{ include "slurmbridge.schedulerTlsDir" . }}/tls.crt
      keyFile: {{ include "slurmbridge.schedulerTlsDir" . }}/tls.key
      caFile: {{ include "slurmbridge.schedulerTlsDir" . }}/ca.crt
    httpTimeout: {{ .Values.scheduler.extenderTimeout }}
{{- end -}}

{{/* The tenancy file (bridge/policy/tenancy.py): its own ConfigMap, outside configChecksum, so a
change reaches the running processes without a rollout. */}}
{{- define "slurmbridge.tenancy" -}}
{{- $tenancy := dict "namespaces" (.Values.tenancy.namespaces | default dict) "priority_classes" (.Values.tenancy.priorityClasses | default dict) -}}
{{- if not (kindIs "invalid" .Values.tenancy.default) }}{{ $_ := set $tenancy "default" .Values.tenancy.default }}{{ end -}}
{{- toYaml $tenancy -}}
{{- end -}}

{{/* "true" when the chart renders Prometheus Operator ServiceMonitors: asked for, and the
cluster has the CRD (helm template: --api-versions monitoring.coreos.com/v1/ServiceMonitor). */}}
{{- define "slurmbridge.serviceMonitors" -}}
{{- if and .Values.monitoring.serviceMonitor.enabled (.Capabilities.APIVersions.Has "monitoring.coreos.com/v1/ServiceMonitor") -}}true{{- end -}}
{{- end -}}
{{- define "slurmbridge.slurmctld.name" -}}{{ include "slurmbridge.fullname" . }}-slurmctld{{- end -}}

{{- /*
"true" when a created pod is checked by the validating webhook after every mutation (two
reviews), "false" when the mutating webhook's one review (/admit) checks it.  webhook.
validateCreates "auto" picks one review only where no replica that cannot answer /admit may
still serve: helm reaches the cluster (lookup answers; `helm template` does not) and the
release's webhook Deployment is absent (a first install) or of a release that serves /admit
(its slurmbridge.io/webhook-paths annotation) and fully rolled out (no replica of another
template left, none terminating).  Anything else (`helm template`, an upgrade from an
earlier release, a rollout still under way) gets two reviews: an earlier replica answers
/admit with 404, which refuses the create.
*/ -}}
{{- define "slurmbridge.webhook.checksCreates" -}}
{{- $set := .Values.webhook.validateCreates -}}
{{- if ne (toString $set) "auto" -}}
{{- ternary "true" "false" $set -}}
{{- else -}}
{{- $reached := lookup "v1" "Namespace" "" "kube-system" -}}
{{- $running := lookup "apps/v1" "Deployment" .Release.Namespace (include "slurmbridge.webhook.name" .) -}}
{{- $servesAdmit := true -}}
{{- if $running -}}
{{- $paths := index ($running.metadata.annotations | default dict) (include "slurmbridge.webhook.pathsKey" .) | default "" -}}
{{- $status := $running.status | default dict -}}
{{- $current := eq (int ($status.observedGeneration | default 0)) (int $running.metadata.generation) -}}
{{- $oldLeft := or (ne (int ($status.updatedReplicas | default 0)) (int ($status.replicas | default 0))) (gt (int ($status.terminatingReplicas | default 0)) 0) -}}
{{- $rolledOut := and $current (not $oldLeft) -}}
{{- $servesAdmit = and (has "admit" (splitList "," $paths)) $rolledOut -}}
{{- end -}}
{{- ternary "false" "true" (and (not (empty $reached)) $servesAdmit) -}}
{{- end -}}
{{- end -}}
{{- define "slurmbridge.webhook.pathsKey" -}}slurmbridge.io/webhook-paths{{- end -}}
