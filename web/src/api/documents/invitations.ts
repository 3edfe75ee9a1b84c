/** Invitations (invitations.graphql, typed by graphql-codegen). */
export {
  InvitationFieldsFragmentDoc as INVITATION_FIELDS,
  InvitationsDocument as INVITATIONS,
  InviteMemberDocument as INVITE_MEMBER,
} from "../generated";
