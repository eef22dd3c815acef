{{/* Names, labels and small decisions shared by the templates. */}}

{{- define "warmstart.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "warmstart.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 53 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 53 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 53 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "warmstart.selectorLabels" -}}
app.kubernetes.io/name: {{ include "warmstart.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: operator
{{- end }}

{{/* Labels of every object, without the component. */}}
{{- define "warmstart.commonLabels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
app.kubernetes.io/name: {{ include "warmstart.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: warmstart
{{- end }}

{{- define "warmstart.labels" -}}
{{ include "warmstart.commonLabels" . }}
app.kubernetes.io/component: operator
{{- end }}

{{- define "warmstart.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "warmstart.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "warmstart.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}

{{/* kopf peering is on with more than one replica, or when forced. */}}
{{- define "warmstart.peering" -}}
{{- if or .Values.peering.enabled (gt (int .Values.replicaCount) 1) }}true{{ end }}
{{- end }}

{{/* The operator's rules inside a namespace it watches: a ClusterRole's (all namespaces) or a Role's (one). */}}
{{- define "warmstart.namespacedRules" -}}
# the four kinds: read and finalize them, write their status
- apiGroups: [inference.sagemaker.aws.amazon.com]
  resources: [inferenceendpointconfigs, jumpstartmodels, modeldatacacheconfigs, modelimagecaches]
  verbs: [get, list, watch, create, patch, update, delete]
- apiGroups: [inference.sagemaker.aws.amazon.com]
  resources:
    - inferenceendpointconfigs/status
    - jumpstartmodels/status
    - modeldatacacheconfigs/status
    - modelimagecaches/status
    - inferenceendpointconfigs/finalizers
    - jumpstartmodels/finalizers
    - modeldatacacheconfigs/finalizers
    - modelimagecaches/finalizers
  verbs: [get, patch, update]
# preload Jobs, pre-pull DaemonSets, model and router Deployments, Services, router ConfigMaps
- apiGroups: [batch]
  resources: [jobs]
  verbs: [get, list, watch, create, patch, update, delete]
- apiGroups: [apps]
  resources: [daemonsets, deployments]
  verbs: [get, list, watch, create, patch, update, delete]
- apiGroups: [apps]
  resources: [replicasets]
  verbs: [get, list, watch]
- apiGroups: [""]
  resources: [services, configmaps]
  verbs: [get, list, watch, create, patch, update, delete]
# the routers' disruption budgets (one router pod evicted at a time)
- apiGroups: [policy]
  resources: [poddisruptionbudgets]
  verbs: [get, create, patch, delete]
# the routers' NetworkPolicies (the admin port closed to clients)
- apiGroups: [networking.k8s.io]
  resources: [networkpolicies]
  verbs: [get, create, patch, delete]
# the routers' sync keys: one Secret per endpoint (`<endpoint>-router-sync`), read back only to keep its key and to
# check its owner before an apply or a removal; no list or watch
- apiGroups: [""]
  resources: [secrets]
  verbs: [get, create, patch, delete]
# pods: where an endpoint's replicas run (warm/cold placement), preload and pre-pull progress; create only with
# dryRun=All, the Pod Security check of a model pod before its Deployment is applied (the dry-run-pods policy in
# admission.yaml refuses any other create)
- apiGroups: [""]
  resources: [pods]
  verbs: [get, list, watch, create]
# the router's identity: a ServiceAccount and a Role that reads its ConfigMap and the EndpointSlices. Granting a
# Role requires holding its permissions, hence endpointslices below.
- apiGroups: [""]
  resources: [serviceaccounts]
  verbs: [get, list, watch, create, patch, delete]
- apiGroups: [rbac.authorization.k8s.io]
  resources: [roles, rolebindings]
  verbs: [get, list, watch, create, patch, delete]
- apiGroups: [discovery.k8s.io]
  resources: [endpointslices]
  verbs: [get, list, watch]
- apiGroups: ["", events.k8s.io]
  resources: [events]
  verbs: [create, patch]
# endpoint metrics: a PodMonitor per endpoint with `metrics`, where the Prometheus Operator's CRD is installed
- apiGroups: [monitoring.coreos.com]
  resources: [podmonitors]
  verbs: [get, list, watch, create, patch, delete]
# FSx sources: the claim bound to the static PersistentVolume; listed by the finalizer that lets go of it
- apiGroups: [""]
  resources: [persistentvolumeclaims]
  verbs: [list, create, patch, delete]
# gateway mode (intelligentRoutingSpec.endpointPicker): the endpoint's InferencePool, applied and pruned by name
- apiGroups: [inference.networking.k8s.io]
  resources: [inferencepools]
  verbs: [get, create, patch, delete]
# the endpoint picker's Lease: the operator creates it (owned by the endpoint) and grants the picker get and update on
# it alone, which it may grant only by holding them
- apiGroups: [coordination.k8s.io]
  resources: [leases]
  verbs: [get, create, patch, update, delete]
# autoScalingSpec: the KEDA ScaledObject of an endpoint (KEDA itself makes the HPA)
- apiGroups: [keda.sh]
  resources: [scaledobjects]
  verbs: [create, patch, delete]
{{- if and (include "warmstart.peering" .) .Values.watchNamespaces }}
- apiGroups: [kopf.dev]
  resources: [kopfpeerings]
  verbs: [get, list, watch, patch]
{{- end }}
{{- end }}

{{- /* Connection settings (mirror endpoints, proxies, CA bundles): only preload.endpoints may set them, never
preload.env, whose values reach pods from a Secret a tenant may be able to edit (api/preloading.py CONNECTION_ENV). */}}
{{- define "warmstart.checkPreloadEnv" -}}
{{- range $name, $_ := .Values.preload.env }}
{{- if has $name (list "ALL_PROXY" "AWS_CA_BUNDLE" "AWS_CONFIG_FILE" "AWS_ENDPOINT_URL" "AWS_ENDPOINT_URL_S3" "AWS_ENDPOINT_URL_STS" "AWS_PROFILE" "AWS_USE_DUALSTACK_ENDPOINT" "AWS_USE_FIPS_ENDPOINT" "CURL_CA_BUNDLE" "HF_ENDPOINT" "HTTPS_PROXY" "HTTP_PROXY" "NO_PROXY" "REQUESTS_CA_BUNDLE" "SSL_CERT_DIR" "SSL_CERT_FILE" "all_proxy" "http_proxy" "https_proxy" "no_proxy") }}
{{- fail (printf "preload.env.%s is a connection setting: a tenant who can edit the preload Secret of its namespace could point shared caches at its own mirror; set it in preload.endpoints" $name) }}
{{- end }}
{{- end }}
{{- end }}

{{- /* The Secret holding the CSI driver's Job signing key (key `job-signing-key`): the admin's, or the chart's own. */}}
{{- define "warmstart.signingKeySecret" -}}
{{- .Values.csi.signingKeySecret | default (printf "%s-csi" (include "warmstart.fullname" .)) -}}
{{- end }}
