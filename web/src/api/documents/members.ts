/** Members (members.graphql, typed by graphql-codegen). */
export {
  MembersDocument as MEMBERS,
  RemoveMemberDocument as REMOVE_MEMBER,
  SetMemberRoleDocument as SET_MEMBER_ROLE,
} from "../generated";
export type { MemberFieldsFragment as Member, Role } from "../generated";
