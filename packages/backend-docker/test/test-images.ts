/** Images built by tooling/engine/setup.sh; no registry is needed. */
export const BUSYBOX_IMAGE = 'cordon-test/busybox:latest'
export const NODE_IMAGE = 'cordon-test/node:latest'
