/** Usage (usage.graphql, typed by graphql-codegen). */
export { UsageDocument as USAGE, UsageTokensDocument as USAGE_TOKENS } from "../generated";
