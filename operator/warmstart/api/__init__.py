"""The warmstart API: the CRD models (the one source of truth for crds/) and the other wire contracts.

The other contracts are shared by the operator and the programs it launches or the cluster it labels:
node label keys (`nodelabels`), routing strategies (`strategies`), the router's configuration (`routers`)
and JumpStart resolution (`jumpstartspecs`). The router and the preloader may import only this package.
"""

GROUP = "inference.sagemaker.aws.amazon.com"
VERSION = "v1"
API_VERSION = f"{GROUP}/{VERSION}"
