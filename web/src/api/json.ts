/** The `JSON` scalar as the app reads it (the generated types map the scalar here). */
export type Json = null | boolean | number | string | Json[] | { [key: string]: Json };
