// Names the run (every container and network the stand-ins make is labelled
// with it), and fails it if any of them is still there at the end.
export { leakCheckedTestRun as default } from '@cordon/test-support'
