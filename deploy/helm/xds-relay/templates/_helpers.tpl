{{/* Every object's labels: the base's, and Helm's own. */}}
{{- define "xds-relay.labels" -}}
app.kubernetes.io/name: xds-relay
app.kubernetes.io/part-of: xds-relay
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end }}

{{/* The selector of the relay's pods. */}}
{{- define "xds-relay.selector" -}}
app.kubernetes.io/name: xds-relay
{{- end }}

{{/* The image: repository@digest, or repository:tag. */}}
{{- define "xds-relay.image" -}}
{{- if .Values.image.digest -}}
{{ .Values.image.repository }}@{{ .Values.image.digest }}
{{- else -}}
{{ .Values.image.repository }}:{{ required "image.tag or image.digest" .Values.image.tag }}
{{- end -}}
{{- end }}

{{/* The relay's config.yaml: .Values.config with upstream.xds_servers from
.Values.upstreamServers and, last, the relays' own Service. */}}
{{- define "xds-relay.config" -}}
{{- $cfg := deepCopy .Values.config -}}
{{- $servers := list -}}
{{- range required "upstreamServers: at least one control plane" .Values.upstreamServers -}}
{{- $servers = append $servers . -}}
{{- end -}}
{{- if .Values.siblingFallback -}}
{{- $servers = append $servers (dict "server_uri" (printf "xds-relay.%s.svc.cluster.local:18001" .Release.Namespace) "channel_creds" (list (dict "type" "insecure"))) -}}
{{- end -}}
{{- $up := deepCopy (get $cfg "upstream" | default dict) -}}
{{- $_ := set $up "xds_servers" $servers -}}
{{- $_ := set $cfg "upstream" $up -}}
{{- toYaml $cfg -}}
{{- end }}
