{{/* Names, labels and the operator's command line, shared by the templates. */}}

{{/* The chart's name. */}}
{{- define "tenancy-hub.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* The objects' name: the release's when it contains the chart's name (release tenancy-hub gives
deploy/'s names), else "<release>-<chart>". */}}
{{- define "tenancy-hub.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := include "tenancy-hub.name" . -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* The labels that select the operator's pods. */}}
{{- define "tenancy-hub.selectorLabels" -}}
app.kubernetes.io/name: {{ include "tenancy-hub.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{/* The labels of every object. */}}
{{- define "tenancy-hub.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{ include "tenancy-hub.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{/* The Secret of the member clusters' kubeconfigs. */}}
{{- define "tenancy-hub.kubeconfigSecret" -}}
{{- default (printf "%s-kubeconfigs" (include "tenancy-hub.fullname" .)) .Values.memberKubeconfigs.secretName -}}
{{- end -}}

{{/* --http-addr's value: an IPv6 address in brackets. */}}
{{- define "tenancy-hub.httpAddr" -}}
{{- $address := toString .Values.http.address -}}
{{- if contains ":" $address -}}
{{- printf "[%s]:%v" $address .Values.http.port -}}
{{- else -}}
{{- printf "%s:%v" $address .Values.http.port -}}
{{- end -}}
{{- end -}}

{{/* Settings that cannot work together, refused with what to do. */}}
{{- define "tenancy-hub.validate" -}}
{{- if and (gt (int .Values.shards) 1) (not .Values.leaderElection.enabled) -}}
{{- fail "shards > 1 needs leader election: set leaderElection.enabled=true" -}}
{{- end -}}
{{- if and (gt (int .Values.replicas) 1) (not .Values.leaderElection.enabled) -}}
{{- fail "several replicas without leader election would fight each other: set replicas=1 or leaderElection.enabled=true" -}}
{{- end -}}
{{- if and .Values.serviceMonitor.enabled (not .Values.service.enabled) -}}
{{- fail "the ServiceMonitor scrapes through the Service: set service.enabled=true" -}}
{{- end -}}
{{- end -}}

{{/* The operator's arguments: deploy/deployment.yaml's, then a flag for each value that is not the
operator's default. Only flags of `tenancy-hub run` (src/cli/args.rs). */}}
{{- define "tenancy-hub.args" -}}
- run
- --kubeconfig=/etc/tenancy-hub/config/hub-kubeconfig.yaml
- --context=hub
- --clusters=/etc/tenancy-hub/config/clusters.yaml
- --chart-home=/charts
- --tenancy-policy={{ .Values.tenancyPolicy }}
- --http-addr={{ include "tenancy-hub.httpAddr" . }}
- --log-format={{ .Values.logFormat }}
- --chart-cache-dir=/var/cache/tenancy-hub/charts
- --chart-cache-size={{ .Values.chartCache.size }}
{{- if not .Values.leaderElection.enabled }}
- --leader-elect=false
{{- end }}
{{- if gt (int .Values.shards) 1 }}
- --shards={{ int .Values.shards }}
{{- end }}
{{- if ne .Values.executor "auto" }}
- --executor={{ .Values.executor }}
{{- end }}
{{- end -}}
