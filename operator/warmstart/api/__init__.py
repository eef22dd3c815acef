"""The warmstart API: the CRD models (the one source of truth for crds/) and the other wire contracts.

The other contracts are shared by the operator and the programs it launches or the cluster it labels:
node label keys (`nodelabels`), routing strategies (`strategies`), the router's configuration (`routers`)
and JumpStart resolution (`jumpstartspecs`). The router and the preloader may import only this package.
"""

GROUP = "inference.sagemaker.aws.amazon.com"
VERSION = "v1"
API_VERSION = f"{GROUP}/{VERSION}"
#: HyperPod's earlier version of the endpoint kinds, served next to VERSION (same schema: see docs/api-versions.md)
ALPHA_VERSION = "v1alpha1"
#: the label every warmstart CRD carries, so the chart and the operator can tell AWS's CRDs of the same names apart
CRD_OWNER_LABEL = "warmstart.io/crd-owner"
CRD_OWNER = "warmstart"
