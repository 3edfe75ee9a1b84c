/** Usage (usage.graphql, typed by graphql-codegen). */
export { UsageDocument as USAGE } from "../generated";
