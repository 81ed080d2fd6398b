// Names the run, and fails it if a guest container labelled with it is left.
export { leakCheckedTestRun as default } from '@cordon/test-support'
