// Names the run, and fails it if any container, volume, network or image labelled with it is left.
export { leakCheckedTestRun as default } from '@cordon/test-support'
