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

{{- /* The operator's permissions (one list, used by the ClusterRole and by each Role). */ -}}
{{- define "specguard.operatorRules" -}}
# The resource: watch it, write its status, and read what it says. Never spec: the
# operator's manual controls are annotations (pin-mode, retry) that people set.
- apiGroups: [specguard.io]
  resources: [speculativedeployments]
  verbs: [get, list, watch, patch]
- apiGroups: [specguard.io]
  resources: [speculativedeployments/status]
  verbs: [get, patch, update]
# Owner references with blockOwnerDeletion need this where the
# OwnerReferencesPermissionEnforcement admission plugin is on.
- apiGroups: [specguard.io]
  resources: [speculativedeployments/finalizers]
  verbs: [update]
# What it renders: the two vLLM Deployments, the router Deployment, the Services.
- apiGroups: [apps]
  resources: [deployments]
  verbs: [get, list, watch, create, patch, update, delete]
- apiGroups: [""]
  resources: [services, serviceaccounts]
  verbs: [get, list, watch, create, patch, update, delete]
# The router's Role and RoleBinding. No bind or escalate: the router's Role grants
# reading pods and speculativedeployments, which the operator holds itself, so the API
# server lets it create and bind that Role and nothing broader.
- apiGroups: [rbac.authorization.k8s.io]
  resources: [roles, rolebindings]
  verbs: [get, list, watch, create, patch, update, delete]
# Pods of the arms: readiness during the swap, startup failures (read only).
- apiGroups: [""]
  resources: [pods]
  verbs: [get, list, watch]
# Events that carry the verdicts' numbers.
- apiGroups: [""]
  resources: [events]
  verbs: [create, patch]
- apiGroups: [events.k8s.io]
  resources: [events]
  verbs: [create, patch]
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
