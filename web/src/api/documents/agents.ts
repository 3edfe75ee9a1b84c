/** Per-agent stats (agents.graphql, typed by graphql-codegen). */
export { AgentStatsDocument as AGENT_STATS } from "../generated";
export type { AgentStatsFieldsFragment as AgentStats } from "../generated";
