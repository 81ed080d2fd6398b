/** The name cordon's proxy is asked for; its lookup maps it to loopback. */
export const UPSTREAM_HOST = 'upstream.bench'
