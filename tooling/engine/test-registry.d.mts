export declare const REGISTRY_BINARY: string

export interface LocalRegistry {
  readonly port: number
  /** `127.0.0.1:PORT`, the registry part of the names of images pushed to it. */
  readonly host: string
  stop(): Promise<void>
}

export declare function startLocalRegistry(options?: {
  readonly users?: Readonly<Record<string, string>>
}): Promise<LocalRegistry>

export interface RegistryProxy extends LocalRegistry {
  readonly requests: ReadonlyArray<{
    readonly method: string
    readonly path: string
    readonly authorization: boolean
  }>
  slowDownloads(): number
}

export declare function startRegistryProxy(
  upstreamPort: number,
  options?: { readonly slowBlobs?: boolean },
): Promise<RegistryProxy>

export declare function pushTestImage(
  source: string,
  target: string,
  auth?: { readonly username: string; readonly password: string; readonly serveraddress: string },
): Promise<void>
