"""One topology file for both datacenters: its schema, the router's flags and the instances'
launch commands and Kubernetes manifests built from it."""
