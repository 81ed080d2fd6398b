import { AsyncLocalStorage } from 'node:async_hooks'
import { type Context, type ContextManager, ROOT_CONTEXT } from '@opentelemetry/api'

/**
 * A context manager on AsyncLocalStorage, as a host's Node SDK registers
 * (`@opentelemetry/context-async-hooks`): the active context follows awaits
 * and timers, so work a call sets off in the background runs in its context.
 */
export class AsyncLocalContextManager implements ContextManager {
  private readonly storage = new AsyncLocalStorage<Context>()
  active(): Context {
    return this.storage.getStore() ?? ROOT_CONTEXT
  }
  with<A extends unknown[], F extends (...args: A) => ReturnType<F>>(
    active: Context,
    fn: F,
    thisArg?: ThisParameterType<F>,
    ...args: A
  ): ReturnType<F> {
    return this.storage.run(active, () => fn.call(thisArg, ...args))
  }
  bind<T>(_context: Context, target: T): T {
    return target
  }
  enable(): this {
    return this
  }
  disable(): this {
    this.storage.disable()
    return this
  }
}
