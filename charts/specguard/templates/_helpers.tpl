{{- define "specguard.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "specguard.fullname" -}}
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

{{- define "specguard.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "specguard.selectorLabels" -}}
app.kubernetes.io/name: {{ include "specguard.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: operator
{{- end }}

{{- define "specguard.labels" -}}
helm.sh/chart: {{ include "specguard.chart" . }}
app.kubernetes.io/name: {{ include "specguard.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/part-of: specguard
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{- define "specguard.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "specguard.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "specguard.image" -}}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}
{{- end }}

{{- /* Namespaces the operator acts in: the watched ones, or "" for the whole cluster. */ -}}
{{- define "specguard.clusterWide" -}}
{{- if not .Values.watchNamespaces }}true{{ end }}
{{- end }}

{{- /* The operator's permissions in a watched namespace (the ClusterRole, or each Role).
Verbs are what `specguard run` does: server-side apply (patch; create when the object is
new) of what the renderer produces, status patches, Events, and watches. */ -}}
{{- define "specguard.operatorRules" -}}
# The resource: watch it and write its status, nothing else. The operator puts no
# finalizer or annotation on it, so it holds no patch or update on the resource itself:
# it cannot write spec (GitOps owns it; manual controls are annotations people set).
- apiGroups: [specguard.io]
  resources: [speculativedeployments]
  verbs: [get, list, watch]
- apiGroups: [specguard.io]
  resources: [speculativedeployments/status]
  verbs: [get, patch]
# Owner references with blockOwnerDeletion need this where the
# OwnerReferencesPermissionEnforcement admission plugin is on.
- apiGroups: [specguard.io]
  resources: [speculativedeployments/finalizers]
  verbs: [update]
# What it renders (`specguard render`): the two vLLM Deployments and the router, their
# Services, the router's ServiceAccount, Role and RoleBinding. Applied server-side; the
# garbage collector deletes them with the resource (owner references), so no delete.
# No bind or escalate: the router's Role grants reading pods and speculativedeployments,
# which the operator holds itself, and the API server lets a subject create and bind a
# Role only within its own permissions.
- apiGroups: [apps]
  resources: [deployments]
  verbs: [get, list, watch, create, patch]
- apiGroups: [""]
  resources: [services]
  verbs: [get, list, watch, create, patch]
- apiGroups: [""]
  resources: [serviceaccounts]
  verbs: [get, create, patch]
- apiGroups: [rbac.authorization.k8s.io]
  resources: [roles, rolebindings]
  verbs: [get, create, patch]
# The arms' pods: readiness during a swap, startup failures (read only).
- apiGroups: [""]
  resources: [pods]
  verbs: [get, list, watch]
# Events that carry the verdicts' numbers (kopf's too).
- apiGroups: [""]
  resources: [events]
  verbs: [create]
{{- end }}

{{- /* Where PodMonitors look for pods: the watched namespaces, or all. */ -}}
{{- define "specguard.monitorNamespaces" -}}
namespaceSelector:
{{- if .Values.watchNamespaces }}
  matchNames:
    {{- toYaml .Values.watchNamespaces | nindent 4 }}
{{- else }}
  any: true
{{- end }}
{{- end }}

